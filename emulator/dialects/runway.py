"""Runway's developer API (version 2024-11-06) under `/runway`: image_to_video, tasks, organization.

Auth: `Authorization: Bearer <any non-empty key>` and `X-Runway-Version: 2024-11-06`, else 401 /
400. Errors are `{"error": "<message>"}` (validation adds `issues`); 429 and 5xx carry
`Retry-After`. Statuses PENDING, THROTTLED (over the running limit), RUNNING (with `progress`),
SUCCEEDED (`output: [url]`), FAILED (`failure`, `failureCode`: the content filter's
`SAFETY.INPUT.TEXT`; an injected failure is `INTERNAL.BAD_OUTPUT.CODE01`; an unusable image
`ASSET.INVALID`), CANCELLED. DELETE cancels a task that has not ended; a finished task is left as
it is (Runway would delete it, which the adapter never asks for).
"""

from __future__ import annotations

import uuid
from typing import Literal

from fastapi import APIRouter, Depends, Header, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, ValidationError

from adapters.providers.emulator_api import JobOut, SubmitIn
from emulator.dialects import DialectError, engine_ratio, retry_headers
from emulator.engine import Engine, EngineRefusal

PREFIX = "runway"
VERSION = "2024-11-06"
RATIOS = Literal["1280:720", "720:1280", "1104:832", "832:1104", "960:960", "1584:672"]
_STATUS = {"queued": "PENDING", "throttled": "THROTTLED", "running": "RUNNING", "succeeded": "SUCCEEDED",
           "failed": "FAILED", "canceled": "CANCELLED"}


class ImageToVideoIn(BaseModel):
    model: Literal["gen4_turbo", "gen3a_turbo"]
    promptImage: str = Field(min_length=1)  # noqa: N815 - Runway's field names
    promptText: str = Field(default="", max_length=1000)  # noqa: N815
    ratio: RATIOS
    duration: int = Field(default=5, ge=2, le=10)
    seed: int | None = Field(default=None, ge=0, le=4294967295)
    contentModeration: dict | None = None  # noqa: N815 - accepted, not acted on


def _error(status: int, message: str, headers: dict[str, str] | None = None, **extra: object) -> DialectError:
    return DialectError(JSONResponse({"error": message, **extra}, status_code=status, headers=headers))


def _refused(exc: EngineRefusal) -> DialectError:
    return _error(exc.status, exc.message, retry_headers("Retry-After", exc.retry_after_s))


def invalid_request(exc: RequestValidationError) -> JSONResponse:
    issues = [{"path": [str(p) for p in e.get("loc", ())[1:]], "message": e.get("msg", "")} for e in exc.errors()]
    return JSONResponse({"error": "Validation of body failed", "issues": issues}, status_code=400)


def require_auth(authorization: str | None = Header(default=None),
                 x_runway_version: str | None = Header(default=None)) -> None:
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise _error(401, "Invalid API key. Make sure you are using a valid API key.")
    if x_runway_version != VERSION:
        raise _error(400, f"The X-Runway-Version header must be set to a valid API version ({VERSION}).")


def failure_code(code: str) -> str:
    """The engine's failure codes in Runway's vocabulary."""
    if code.startswith("SAFETY."):
        return code
    if code.startswith("INPUT."):
        return "ASSET.INVALID"
    return "INTERNAL.BAD_OUTPUT.CODE01" if code == "INTERNAL.SIMULATED_FAILURE" else code


def task_json(job: JobOut) -> dict:
    task: dict = {"id": job.id, "status": _STATUS[job.status],
                  "createdAt": job.created_at.isoformat().replace("+00:00", "Z")}
    if job.status == "running":
        task["progress"] = round(job.progress, 4)
    if job.status == "succeeded":
        task["output"] = [o.url for o in job.output or []]
    if job.status == "failed" and job.error:
        task["failure"] = job.error.message or "The task failed."
        task["failureCode"] = failure_code(job.error.code)
    return task


def router(engine: Engine) -> APIRouter:
    api = APIRouter(prefix=f"/{PREFIX}/v1", dependencies=[Depends(require_auth)])

    @api.post("/image_to_video")
    async def image_to_video(body: ImageToVideoIn, request: Request) -> dict:
        ratio = engine_ratio(body.ratio)
        if ratio is None:
            raise _error(400, f"ratio {body.ratio} is not rendered by the emulator")
        try:
            submit = SubmitIn(request_key=f"{PREFIX}:{uuid.uuid4().hex}", model=body.model,
                              prompt=body.promptText, image_url=body.promptImage, aspect_ratio=ratio,
                              duration_s=body.duration)
        except ValidationError as exc:
            raise _error(400, "Validation of body failed", issues=exc.errors(include_url=False)) from None
        try:
            job = await engine.submit(submit, request, PREFIX)
        except EngineRefusal as exc:
            raise _refused(exc) from None
        return {"id": job.id}

    @api.get("/tasks/{task_id}")
    def get_task(task_id: str) -> dict:
        try:
            return task_json(engine.status(task_id, PREFIX))
        except EngineRefusal as exc:
            raise _refused(exc) from None

    @api.delete("/tasks/{task_id}", status_code=204)
    def delete_task(task_id: str) -> Response:
        try:
            engine.cancel(task_id, PREFIX)
        except EngineRefusal as exc:
            raise _refused(exc) from None
        return Response(status_code=204)

    @api.get("/organization")
    def organization() -> dict:
        return {"creditBalance": 100000,
                "tier": {"maxMonthlyCreditSpend": 100000,
                         "models": {m: {"maxConcurrentGenerations": engine.faults.tuning(engine.config).max_running,
                                        "maxDailyGenerations": 10000} for m in ("gen4_turbo", "gen3a_turbo")}},
                "usage": {"models": {}}}

    return api
