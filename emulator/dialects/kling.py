"""Kling AI's API v1 under `/kling`: image2video tasks, lookup by task id or `external_task_id`, list.

Auth: `Authorization: Bearer <JWT>`, HS256 with `iss`, `exp`, `nbf`, signed with the emulated
secret key (`emulator-dev-key`, what an emulated provider is given); else HTTP 401 with code 1000
(bad signature), 1001 (missing), 1004 (expired). Answers are `{code, message, request_id, data}`;
refusals: 429 with code 1303 (parallel tasks over the plan: an injected 429 or a full queue, no
Retry-After, as Kling sends none), 500/503 with codes 5000/5001, 400 with 1201 (bad parameters or
an `external_task_id` used before). Statuses: waiting jobs are `submitted`, running ones
`processing`, then `succeed` (`task_result.videos[]`) or `failed` (`task_status_msg`; the content
filter's refusal reads "Failure to pass the risk control system"). No cancel endpoint, like Kling.
"""

from __future__ import annotations

import uuid
from typing import Literal

import jwt
from fastapi import APIRouter, Depends, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, ValidationError

from adapters.providers.emulator_api import JobOut, SubmitIn
from adapters.providers.http import EMULATED_API_KEY
from emulator.dialects import DialectError
from emulator.engine import Engine, EngineRefusal

PREFIX = "kling"
_STATUS = {"queued": "submitted", "throttled": "submitted", "running": "processing", "succeeded": "succeed",
           "failed": "failed", "canceled": "failed"}
MODERATION_MSG = "Failure to pass the risk control system"


class Image2VideoIn(BaseModel):
    model_name: Literal["kling-v1", "kling-v1-5", "kling-v1-6", "kling-v2-1", "kling-v2-1-master"] = "kling-v1"
    image: str = Field(min_length=1)
    prompt: str = Field(default="", max_length=2500)
    negative_prompt: str = Field(default="", max_length=2500)
    cfg_scale: float = Field(default=0.5, ge=0, le=1)
    mode: Literal["std", "pro"] = "std"
    duration: Literal["5", "10"] = "5"
    aspect_ratio: Literal["16:9", "9:16", "1:1"] = "16:9"
    callback_url: str | None = None
    external_task_id: str | None = Field(default=None, max_length=200)


def _answer(status: int, code: int, message: str, data: object = None) -> JSONResponse:
    return JSONResponse({"code": code, "message": message, "request_id": uuid.uuid4().hex, "data": data},
                        status_code=status)


def _error(status: int, code: int, message: str) -> DialectError:
    return DialectError(_answer(status, code, message))


def _refused(exc: EngineRefusal) -> DialectError:
    if exc.kind == "not_found":
        return _error(404, 1203, "The requested resource does not exist")
    if exc.status == 429:
        return _error(429, 1303, "Parallel task over resource pack limit")
    return _error(exc.status, 5001 if exc.status == 503 else 5000, exc.message)


def invalid_request(exc: RequestValidationError) -> JSONResponse:
    first = exc.errors()[0] if exc.errors() else {}
    where = ".".join(str(p) for p in first.get("loc", ())[1:])
    return _answer(400, 1201, f"Invalid parameter {where}: {first.get('msg', 'invalid')}")


def require_jwt(authorization: str | None = Header(default=None)) -> None:
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise _error(401, 1001, "Authorization is empty")
    try:
        claims = jwt.decode(token, EMULATED_API_KEY, algorithms=["HS256"], options={"require": ["iss", "exp"]})
    except jwt.ExpiredSignatureError:
        raise _error(401, 1004, "Authorization has expired") from None
    except jwt.PyJWTError:
        raise _error(401, 1000, "Authorization failed") from None
    if not claims.get("iss"):
        raise _error(401, 1000, "Authorization failed")


def task_json(job: JobOut, external_task_id: str | None) -> dict:
    data: dict = {"task_id": job.id, "task_status": _STATUS[job.status], "task_status_msg": None,
                  "task_info": {"external_task_id": external_task_id} if external_task_id else {},
                  "task_result": None, "created_at": int(job.created_at.timestamp() * 1000),
                  "updated_at": int(job.updated_at.timestamp() * 1000)}
    if job.status == "succeeded":
        data["task_status_msg"] = "Task completed successfully"
        data["task_result"] = {"videos": [{"id": f"video_{job.id}", "url": o.url, "duration": f"{job.duration_s:g}"}
                                          for o in job.output or []]}
    if job.status == "failed" and job.error:
        data["task_status_msg"] = MODERATION_MSG if job.error.code.startswith("SAFETY.") else job.error.message
    if job.status == "canceled":
        data["task_status_msg"] = "Task canceled"
    return data


def _external(request_key: str) -> str | None:
    """Jobs of this dialect carry `kling:{external_task_id}` or `kling:-{uuid}` as request key."""
    rest = request_key.partition(":")[2]
    return None if rest.startswith("-") else rest


def router(engine: Engine) -> APIRouter:
    api = APIRouter(prefix=f"/{PREFIX}/v1/videos", dependencies=[Depends(require_jwt)])

    def ok(data: object) -> dict:
        return {"code": 0, "message": "SUCCEED", "request_id": uuid.uuid4().hex, "data": data}

    def view(job: JobOut) -> dict:
        return task_json(job, _external(engine.store.get(job.id).request_key))

    @api.post("/image2video")
    async def create(body: Image2VideoIn, request: Request) -> dict:
        if body.external_task_id and engine.store.list(f"{PREFIX}:{body.external_task_id}"):
            raise _error(400, 1201, "external_task_id already exists")
        key = f"{PREFIX}:{body.external_task_id or '-' + uuid.uuid4().hex}"
        try:
            submit = SubmitIn(request_key=key, model=body.model_name, prompt=body.prompt, image_url=body.image,
                              aspect_ratio=body.aspect_ratio, duration_s=float(body.duration))
        except ValidationError as exc:
            raise _error(400, 1201, str(exc.errors(include_url=False))[:300]) from None
        try:
            job = await engine.submit(submit, request, PREFIX)
        except EngineRefusal as exc:
            raise _refused(exc) from None
        return ok(view(engine.service.view(job)))

    @api.get("/image2video/{task_id}")
    def get_task(task_id: str) -> dict:
        try:
            return ok(view(engine.status(task_id, PREFIX)))
        except EngineRefusal as exc:
            raise _refused(exc) from None

    @api.get("/image2video")
    def find_or_list(external_task_id: str | None = None, pageNum: int = 1, pageSize: int = 30) -> dict:  # noqa: N803
        try:
            if external_task_id is not None:
                found = engine.listing(PREFIX, f"{PREFIX}:{external_task_id}")
                exact = [j for j in found if _external(engine.store.get(j.id).request_key) == external_task_id]
                if not exact:
                    raise EngineRefusal(404, "not_found", external_task_id)
                return ok(view(exact[0]))
            jobs = list(reversed(engine.listing(PREFIX, f"{PREFIX}:")))
        except EngineRefusal as exc:
            raise _refused(exc) from None
        start = (max(pageNum, 1) - 1) * pageSize
        return ok([view(j) for j in jobs[start:start + pageSize]])

    return api
