"""Luma's Dream Machine API v1 under `/luma/dream-machine/v1`: video generations, list, credits.

Auth: `Authorization: Bearer <any non-empty key>`, else 401 `{"detail": ...}`. Errors are
`{"detail": ...}` (no retry header, as Luma documents none). A generation is `queued` while the
engine's job waits, `dreaming` while it runs, then `completed` (`assets.video`) or `failed`
(`failure_reason`; the content filter's refusal mentions moderation). Each generation echoes its
`request`; the list is newest first with `limit`/`offset`/`has_more`. DELETE removes nothing
here and stops nothing (Luma's DELETE is not a cancel; the adapter never calls it).
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, ValidationError

from adapters.providers.emulator_api import JobOut, SubmitIn
from emulator.dialects import DialectError
from emulator.engine import Engine, EngineRefusal
from emulator.store import JobRecord

PREFIX = "luma"
_STATE = {"queued": "queued", "throttled": "queued", "running": "dreaming", "succeeded": "completed",
          "failed": "failed", "canceled": "failed"}
MODERATION_REASON = "400: prompt not allowed because advanced moderation failed"


class ImageRef(BaseModel):
    type: Literal["image"]
    url: str


class Keyframes(BaseModel):
    frame0: ImageRef | None = None
    frame1: dict[str, Any] | None = None  # an image or a generation reference


class VideoIn(BaseModel):
    model: Literal["ray-1-6", "ray-2", "ray-flash-2"]
    prompt: str = Field(default="", max_length=5000)
    aspect_ratio: Literal["1:1", "16:9", "9:16", "4:3", "3:4", "21:9", "9:21"] = "16:9"
    duration: Literal["5s", "9s"] = "5s"
    resolution: str = "720p"
    loop: bool = False
    keyframes: Keyframes | None = None
    callback_url: str | None = None
    generation_type: Literal["video"] = "video"
    concepts: list[dict[str, Any]] | None = None


def _detail(status: int, detail: str) -> DialectError:
    return DialectError(JSONResponse({"detail": detail}, status_code=status))


def _refused(exc: EngineRefusal) -> DialectError:
    if exc.kind == "not_found":
        return _detail(404, "Generation not found")
    return _detail(exc.status, "Too many requests" if exc.status == 429 else exc.message)


def invalid_request(exc: RequestValidationError) -> JSONResponse:
    return JSONResponse({"detail": exc.errors()}, status_code=400)


def require_auth(authorization: str | None = Header(default=None)) -> None:
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise _detail(401, "Invalid API key")


def generation_json(job: JobOut, record: JobRecord) -> dict:
    request: dict[str, Any] = {"generation_type": "video", "model": job.model, "prompt": record.prompt,
                               "aspect_ratio": job.aspect_ratio, "duration": f"{job.duration_s:g}s",
                               "resolution": "720p"}
    if record.image_url:
        request["keyframes"] = {"frame0": {"type": "image", "url": record.image_url}}
    out: dict[str, Any] = {"id": job.id, "generation_type": "video", "state": _STATE[job.status],
                           "failure_reason": None, "created_at": job.created_at.isoformat().replace("+00:00", "Z"),
                           "model": job.model, "assets": None, "request": request}
    if job.status == "succeeded" and job.output:
        out["assets"] = {"video": job.output[0].url, "image": None, "progress_video": None}
    if job.status == "failed" and job.error:
        out["failure_reason"] = MODERATION_REASON if job.error.code.startswith("SAFETY.") else job.error.message
    if job.status == "canceled":
        out["failure_reason"] = "canceled"
    return out


def router(engine: Engine) -> APIRouter:
    api = APIRouter(prefix=f"/{PREFIX}/dream-machine/v1", dependencies=[Depends(require_auth)])

    def render(job: JobOut) -> dict:
        return generation_json(job, engine.store.get(job.id))

    @api.post("/generations/video", status_code=201)
    async def create(body: VideoIn, request: Request) -> dict:
        frame0 = body.keyframes.frame0 if body.keyframes else None
        try:
            submit = SubmitIn(request_key=f"{PREFIX}:{uuid.uuid4().hex}", model=body.model, prompt=body.prompt,
                              image_url=frame0.url if frame0 else None, aspect_ratio=body.aspect_ratio,
                              duration_s=float(body.duration.removesuffix("s")))
        except ValidationError as exc:
            raise _detail(400, str(exc.errors(include_url=False))[:300]) from None
        try:
            job = await engine.submit(submit, request, PREFIX)
        except EngineRefusal as exc:
            raise _refused(exc) from None
        return render(engine.service.view(job))

    @api.get("/generations/{generation_id}")
    def get_generation(generation_id: str) -> dict:
        try:
            return render(engine.status(generation_id, PREFIX))
        except EngineRefusal as exc:
            raise _refused(exc) from None

    @api.get("/generations")
    def list_generations(limit: int = Query(default=10, ge=1, le=100), offset: int = 0) -> dict:
        try:
            jobs = list(reversed(engine.listing(PREFIX, f"{PREFIX}:")))
        except EngineRefusal as exc:
            raise _refused(exc) from None
        page = jobs[offset:offset + limit]
        return {"generations": [render(j) for j in page], "count": len(page), "limit": limit, "offset": offset,
                "has_more": offset + limit < len(jobs)}

    @api.get("/credits")
    def credits() -> dict:
        return {"credit_balance": 1_000_000.0}

    return api
