"""The emulator's HTTP API (see README.md): provider-style /v1 routes, signed file URLs and
/_sim test hooks, over the sqlite store, the job clock and the render threads."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Header, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse

from adapters.providers.emulator_api import JobList, JobOut, SubmitIn
from emulator.clock import JobClock
from emulator.config import EmulatorConfig
from emulator.dialects import DIALECTS, DialectError, dialect_for
from emulator.engine import Engine, EngineRefusal
from emulator.faults import FaultBoard
from emulator.service import JobService
from emulator.signing import check_file_token
from emulator.stats import StatsBoard
from emulator.store import JobStore
from emulator.webhooks import WebhookSender
from emulator.wire import Faults, SimJobList, SimStats
from emulator.worker import RenderPool


class ApiError(Exception):
    """An error answer in the provider style: `{"error": {"code", "message"}}`."""

    def __init__(self, status: int, code: str, message: str, *, retry_after: str | None = None):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = {"Retry-After": retry_after} if retry_after else None


def _error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    body = {"error": {"code": code, "message": message, **extra}}
    return JSONResponse(jsonable_encoder(body), status_code=status, headers=headers)


def require_bearer(authorization: str | None = Header(default=None)) -> None:
    """Any non-empty bearer token is accepted: the emulator checks the shape, not the key."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "AUTH.MISSING_TOKEN", "Authorization: Bearer <key> required")


def _retry_header(seconds: float | None) -> str | None:
    return None if seconds is None else f"{seconds:g}"


def _as_api_error(exc: EngineRefusal) -> ApiError:
    """An engine refusal in the emulator's own shape and codes."""
    code = {"injected": "SIM.INJECTED_STATUS", "queue_full": "RATE_LIMIT.QUEUE_FULL", "outage": "SIM.OUTAGE",
            "not_found": "NOT_FOUND"}[exc.kind]
    return ApiError(exc.status, code, exc.message, retry_after=_retry_header(exc.retry_after_s))


def create_app(config: EmulatorConfig | None = None, **params: Any) -> FastAPI:
    """Build the app from a config, or from EmulatorConfig fields given as keywords."""
    config = config or EmulatorConfig(**params)
    store = JobStore(config.db_path)
    stats = StatsBoard()
    faults = FaultBoard()
    webhooks = WebhookSender(config.webhook_secret, attempts=config.webhook_attempts, stats=stats, faults=faults)
    service = JobService(config, store, webhooks)
    pool = RenderPool(store, config, stats, on_rendered=lambda: clock.wake())
    clock = JobClock(service, config, faults, stats, on_started=pool.wake)
    engine = Engine(config, store, service, faults, clock, stats)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        webhooks.start()
        pool.start()
        clock.start()
        yield
        await asyncio.to_thread(clock.stop)
        await asyncio.to_thread(pool.stop)
        await asyncio.to_thread(webhooks.stop)
        store.close()

    app = FastAPI(title="reelqueue provider emulator", lifespan=lifespan)
    app.state.config = config

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return _error_response(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(DialectError)
    async def _dialect_error(_: Request, exc: DialectError) -> JSONResponse:
        return exc.response

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        dialect = dialect_for(request.url.path)
        if dialect is not None:
            return dialect.invalid_request(exc)
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return _error_response(
            422, "VALIDATION.INVALID_REQUEST", f"{where}: {first.get('msg', 'invalid')}", details=exc.errors()
        )

    v1 = APIRouter(prefix="/v1", dependencies=[Depends(require_bearer)])

    @v1.post("/jobs", status_code=201)
    async def submit(body: SubmitIn, request: Request) -> JobOut:
        try:
            return service.view(await engine.submit(body, request))
        except EngineRefusal as exc:
            raise _as_api_error(exc) from None

    @v1.get("/jobs/{job_id}")
    def get_job(job_id: str) -> JobOut:
        try:
            return engine.status(job_id)
        except EngineRefusal as exc:
            raise _as_api_error(exc) from None

    @v1.get("/jobs")
    def list_jobs(request_key: str) -> JobList:
        try:
            engine.outage("list_outage_s")
        except EngineRefusal as exc:
            raise _as_api_error(exc) from None
        return JobList(data=[service.view(j) for j in store.list(request_key)])

    @v1.post("/jobs/{job_id}/cancel")
    def cancel(job_id: str) -> JobOut:
        try:
            return engine.cancel(job_id)
        except EngineRefusal as exc:
            raise _as_api_error(exc) from None

    app.include_router(v1)
    for dialect in DIALECTS.values():
        app.include_router(dialect.router(engine))

    @app.get("/files/{job_id}/{token}.mp4", response_class=FileResponse)
    def download(job_id: str, token: str) -> FileResponse:
        if not check_file_token(config.url_secret, job_id, token):
            raise ApiError(403, "URL.EXPIRED_OR_INVALID", "URL expired or invalid: fetch the job again")
        path = config.output_path(job_id)
        if not path.is_file():
            raise ApiError(404, "NOT_FOUND", "no output for this job")
        return FileResponse(path, media_type="video/mp4")

    @app.get("/healthz")
    def healthz() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/_sim/jobs")
    def sim_jobs() -> SimJobList:
        return SimJobList(jobs=[service.sim_view(j) for j in store.list()])

    @app.get("/_sim/stats")
    def sim_stats() -> SimStats:
        return stats.snapshot()

    @app.delete("/_sim/stats")
    def reset_stats() -> SimStats:
        return stats.reset()

    @app.get("/_sim/faults")
    def get_faults() -> Faults:
        return faults.snapshot()

    @app.post("/_sim/faults")
    def set_faults(body: Faults) -> Faults:
        updated = faults.update(body)
        clock.wake()  # a raised max_running starts throttled jobs now
        return updated

    @app.delete("/_sim/faults")
    def reset_faults() -> Faults:
        reset = faults.reset()
        clock.wake()
        return reset

    return app
