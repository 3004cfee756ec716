"""fal's queue API under `/fal`: submit to an app, status, result, cancel.

Auth: `Authorization: Key <any non-empty key>`, else 401 `{"detail": ...}`. Errors are
`{"detail": ...}` (no retry header). A submit answers `{request_id, response_url, status_url,
cancel_url}`; status is `IN_QUEUE` (`queue_position`) while the engine's job waits, `IN_PROGRESS`
while it runs, then `COMPLETED` with `metrics`, or with `error` and `error_type`
(`content_policy_violation` for the content filter, `request_cancelled` after a cancel). The result
is `{video: {url, content_type, file_name, file_size}}`; a failed request's result answers 422.
Cancel answers 202 `CANCELLATION_REQUESTED`, or 400 `ALREADY_COMPLETED`.
"""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Depends, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, ValidationError

from adapters.providers.emulator_api import JobOut, SubmitIn
from emulator.dialects import DialectError
from emulator.engine import Engine, EngineRefusal
from emulator.wire import WAITING

PREFIX = "fal"
APPS = ("fal-ai/kling-video",)


class VideoInput(BaseModel):
    prompt: str = Field(min_length=1, max_length=2500)
    image_url: str | None = None
    duration: str = "5"
    aspect_ratio: str = "16:9"
    negative_prompt: str = ""
    cfg_scale: float = 0.5


def _detail(status: int, detail: object, **extra: object) -> DialectError:
    return DialectError(JSONResponse({"detail": detail, **extra}, status_code=status))


def _refused(exc: EngineRefusal) -> DialectError:
    return _detail(404 if exc.kind == "not_found" else exc.status, exc.message)


def invalid_request(exc: RequestValidationError) -> JSONResponse:
    return JSONResponse({"detail": exc.errors()}, status_code=422)


def require_key(authorization: str | None = Header(default=None)) -> None:
    scheme, _, token = (authorization or "").partition(" ")
    if scheme != "Key" or not token.strip():
        raise _detail(401, "No user found for Key ID and Secret")


def status_json(job: JobOut, position: int) -> dict:
    if job.status in WAITING:
        return {"status": "IN_QUEUE", "queue_position": position}
    if job.status == "running":
        return {"status": "IN_PROGRESS", "logs": None}
    out: dict = {"status": "COMPLETED", "logs": None, "metrics": {"inference_time": job.duration_s}}
    if job.status == "failed" and job.error:
        moderated = job.error.code.startswith("SAFETY.")
        out |= {"error": "The content could not be processed because it violated our content policy" if moderated
                else job.error.message or job.error.code,
                "error_type": "content_policy_violation" if moderated else "internal_error"}
    if job.status == "canceled":
        out |= {"error": "Request cancelled", "error_type": "request_cancelled"}
    return out


def router(engine: Engine) -> APIRouter:
    api = APIRouter(prefix=f"/{PREFIX}", dependencies=[Depends(require_key)])
    base = f"{engine.config.base_url}/{PREFIX}"

    def job(owner: str, alias: str, request_id: str) -> JobOut:
        if f"{owner}/{alias}" not in APPS:
            raise _detail(404, f"App {owner}/{alias} not found")
        try:
            return engine.status(request_id, PREFIX)
        except EngineRefusal as exc:
            raise _refused(exc) from None

    @api.get("/{owner}/{alias}/requests/{request_id}/status")
    def status(owner: str, alias: str, request_id: str) -> dict:
        found = job(owner, alias, request_id)
        waiting = [j.id for j in engine.store.oldest(WAITING)]
        return status_json(found, waiting.index(found.id) if found.id in waiting else 0)

    @api.get("/{owner}/{alias}/requests/{request_id}")
    def result(owner: str, alias: str, request_id: str) -> dict:
        found = job(owner, alias, request_id)
        state = status_json(found, 0)
        if state["status"] != "COMPLETED":
            raise _detail(400, "Request is still in progress")
        if state.get("error"):
            raise _detail(422, [{"type": state["error_type"], "msg": state["error"]}])
        url = found.output[0].url if found.output else ""
        return {"video": {"url": url, "content_type": "video/mp4", "file_name": "output.mp4", "file_size": None}}

    @api.put("/{owner}/{alias}/requests/{request_id}/cancel", status_code=202)
    def cancel(owner: str, alias: str, request_id: str) -> dict:
        found = job(owner, alias, request_id)
        if found.status not in (*WAITING, "running"):
            raise DialectError(JSONResponse({"status": "ALREADY_COMPLETED"}, status_code=400))
        try:
            engine.cancel(request_id, PREFIX)
        except EngineRefusal as exc:
            raise _refused(exc) from None
        return {"status": "CANCELLATION_REQUESTED"}

    @api.post("/{owner}/{alias}/{path:path}")
    async def submit(owner: str, alias: str, path: str, body: VideoInput, request: Request) -> dict:
        app = f"{owner}/{alias}"
        if app not in APPS:
            raise _detail(404, f"App {app} not found")
        if body.duration not in ("5", "10"):
            raise _detail(422, [{"loc": ["body", "duration"], "msg": "must be 5 or 10", "type": "value_error"}])
        try:
            submit_in = SubmitIn(request_key=f"{PREFIX}:{uuid.uuid4().hex}", model=f"{app}/{path}",
                                 prompt=body.prompt, image_url=body.image_url, aspect_ratio=body.aspect_ratio,
                                 duration_s=float(body.duration))
        except ValidationError as exc:
            raise _detail(422, exc.errors(include_url=False)) from None
        try:
            created = await engine.submit(submit_in, request, PREFIX)
        except EngineRefusal as exc:
            raise _refused(exc) from None
        where = f"{base}/{app}/requests/{created.id}"
        return {"request_id": created.id, "response_url": where, "status_url": f"{where}/status",
                "cancel_url": f"{where}/cancel", "queue_position": 0}

    return api
