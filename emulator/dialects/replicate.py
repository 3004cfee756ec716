"""Replicate's HTTP API v1 under `/replicate`: official-model predictions, listing, cancel, webhooks.

Auth: `Authorization: Bearer <token>` (or the older `Token <token>`), else 401. Errors are RFC 7807
`{title, detail, status}` (input errors add `invalid_fields`); 429 and 5xx carry `retry-after`.
Statuses: queued and throttled jobs are `starting`, running ones `processing`, then `succeeded`
(`output` URL, `metrics.predict_time`), `failed` (`error`; the content filter's refusal is E005),
`canceled` if it had started, else `aborted`. The prediction echoes its `input` (the seed is kept
in the engine's request key), so the list endpoint can be searched as on Replicate. Webhooks carry
the prediction JSON with the engine's Standard Webhooks signature.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Literal

from fastapi import APIRouter, Depends, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, ValidationError

from adapters.providers.emulator_api import JobOut, SubmitIn
from emulator.dialects import DialectError, retry_headers
from emulator.engine import Engine, EngineRefusal
from emulator.store import JobRecord

PREFIX = "replicate"
MODELS = ("kwaivgi/kling-v2.1", "kwaivgi/kling-v2.1-master")
PAGE_SIZE = 20
_STATUS = {"queued": "starting", "throttled": "starting", "running": "processing", "succeeded": "succeeded",
           "failed": "failed", "canceled": "canceled"}
MODERATION_ERROR = "The input or output was flagged as sensitive. Please try again with different inputs. (E005)"


class PredictionInput(BaseModel):
    prompt: str = Field(min_length=1, max_length=2500)
    start_image: str | None = None
    duration: Literal[5, 10] = 5
    aspect_ratio: Literal["16:9", "9:16", "1:1"] = "16:9"
    seed: int | None = None
    negative_prompt: str = ""


class PredictionIn(BaseModel):
    input: PredictionInput
    webhook: str | None = None
    webhook_events_filter: list[Literal["start", "output", "logs", "completed"]] | None = None


def _problem(status: int, title: str, detail: str, headers: dict[str, str] | None = None,
             **extra: object) -> JSONResponse:
    return JSONResponse({"title": title, "detail": detail, "status": status, **extra}, status_code=status,
                        headers=headers)


def _refused(exc: EngineRefusal) -> DialectError:
    title = {429: "Request was throttled."}.get(exc.status, "Service unavailable" if exc.status >= 500 else "Error")
    return DialectError(_problem(exc.status, title, exc.message, retry_headers("retry-after", exc.retry_after_s)))


def invalid_request(exc: RequestValidationError) -> JSONResponse:
    fields = [{"field": ".".join(str(p) for p in e.get("loc", ())[1:]), "description": e.get("msg", "")}
              for e in exc.errors()]
    return _problem(422, "Input validation failed", "; ".join(f"{f['field']}: {f['description']}" for f in fields),
                    invalid_fields=fields)


def require_auth(authorization: str | None = Header(default=None)) -> None:
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() not in ("bearer", "token") or not token.strip():
        raise DialectError(_problem(401, "Unauthenticated", "You did not pass a valid authentication token"))


def _iso(value: float | datetime | None) -> str | None:
    if value is None:
        return None
    moment = value if isinstance(value, datetime) else datetime.fromtimestamp(value, UTC)
    return moment.isoformat().replace("+00:00", "Z")


def prediction_json(job: JobOut, record: JobRecord, base: str) -> dict:
    """The prediction for an engine job; `base` is this dialect's public URL."""
    _, _, rest = record.request_key.partition(":")
    seed = rest.partition(":")[0]
    status = _STATUS[job.status]
    if status == "canceled" and record.started_at is None:
        status = "aborted"
    done = job.status in ("succeeded", "failed", "canceled")
    out = {
        "id": job.id, "model": job.model, "version": "emulated",
        "input": {"prompt": record.prompt, "duration": int(job.duration_s), "aspect_ratio": job.aspect_ratio,
                  **({"seed": int(seed)} if seed.isdigit() else {}),
                  **({"start_image": record.image_url} if record.image_url else {})},
        "logs": "", "output": None, "error": None, "status": status, "source": "api", "data_removed": False,
        "created_at": _iso(job.created_at), "started_at": _iso(record.started_at),
        "completed_at": _iso(job.updated_at) if done else None,
        "urls": {"get": f"{base}/v1/predictions/{job.id}", "cancel": f"{base}/v1/predictions/{job.id}/cancel"},
    }
    if done:  # compute time since the start; a video's length when it succeeded
        ran = job.updated_at.timestamp() - record.started_at if record.started_at else 0.0
        out["metrics"] = {"predict_time": round(max(ran, 0.0), 3)}
    if job.status == "succeeded":
        out["output"] = job.output[0].url if job.output else None
        out["metrics"]["video_output_duration_seconds"] = job.duration_s
    if job.status == "failed" and job.error:
        out["error"] = (MODERATION_ERROR if job.error.code.startswith("SAFETY.")
                        else f"Prediction failed: {job.error.message or job.error.code}")
    return out


def router(engine: Engine) -> APIRouter:
    api = APIRouter(prefix=f"/{PREFIX}/v1", dependencies=[Depends(require_auth)])
    base = f"{engine.config.base_url}/{PREFIX}"

    def render(job: JobOut) -> dict:
        return prediction_json(job, engine.store.get(job.id), base)

    engine.on_webhook(PREFIX, lambda job: json.dumps(render(job)).encode())

    def answer(call):  # noqa: ANN001, ANN202 - a zero-argument engine call
        try:
            return call()
        except EngineRefusal as exc:
            if exc.kind == "not_found":
                raise DialectError(_problem(404, "Not found", "The requested resource could not be found.")) from None
            raise _refused(exc) from None

    @api.post("/models/{owner}/{name}/predictions", status_code=201)
    async def create(owner: str, name: str, body: PredictionIn, request: Request) -> dict:
        model = f"{owner}/{name}"
        if model not in MODELS:
            raise DialectError(_problem(404, "Not found", f"Model {model} not found"))
        seed = body.input.seed if body.input.seed is not None else "-"
        try:
            submit = SubmitIn(request_key=f"{PREFIX}:{seed}:{uuid.uuid4().hex}", model=model,
                              prompt=body.input.prompt, image_url=body.input.start_image,
                              aspect_ratio=body.input.aspect_ratio, duration_s=body.input.duration,
                              webhook_url=body.webhook)
        except ValidationError as exc:
            raise DialectError(_problem(422, "Input validation failed", str(exc.errors(include_url=False)))) from None
        try:
            job = await engine.submit(submit, request, PREFIX)
        except EngineRefusal as exc:
            raise _refused(exc) from None
        return render(engine.service.view(job))

    @api.get("/predictions/{prediction_id}")
    def get_prediction(prediction_id: str) -> dict:
        return render(answer(lambda: engine.status(prediction_id, PREFIX)))

    @api.post("/predictions/{prediction_id}/cancel")
    def cancel(prediction_id: str) -> dict:
        return render(answer(lambda: engine.cancel(prediction_id, PREFIX)))

    @api.get("/predictions")
    def list_predictions(cursor: int = 0) -> dict:
        newest_first = list(reversed(answer(lambda: engine.listing(PREFIX, f"{PREFIX}:"))))
        page = newest_first[cursor:cursor + PAGE_SIZE]
        more = cursor + PAGE_SIZE < len(newest_first)
        return {"previous": None, "next": f"{base}/v1/predictions?cursor={cursor + PAGE_SIZE}" if more else None,
                "results": [render(job) for job in page]}

    @api.get("/account")
    def account() -> dict:
        return {"type": "organization", "username": "reelqueue-emulator", "name": "reelqueue emulator",
                "github_url": None}

    @api.get("/webhooks/default/secret")
    def webhook_secret() -> dict:
        return {"key": engine.config.webhook_secret}

    return api
