"""The emulator's HTTP API (see README.md): provider-style /v1 routes, signed file URLs and
/_sim test hooks, over the sqlite store, the job clock and the render threads."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Header, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse

from emulator.clock import JobClock
from emulator.config import EmulatorConfig
from emulator.faults import DEFECTS, FaultBoard
from emulator.service import JobService
from emulator.signing import check_file_token
from emulator.stats import StatsBoard
from emulator.store import JobRecord, JobStore
from emulator.webhooks import WebhookSender
from emulator.wire import ALIVE, WAITING, Faults, JobList, JobOut, SimJobList, SimStats, SubmitIn
from emulator.worker import RenderPool

_RETRY_AFTER_S = "1"


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


async def _hold_answer(request: Request, seconds: float) -> None:
    """The submit_hang fault: the job exists, the answer never comes in time. Stops early once
    the client has hung up, so a stopped test server is not kept waiting."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not await request.is_disconnected():
        await asyncio.sleep(0.1)


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

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return _error_response(
            422, "VALIDATION.INVALID_REQUEST", f"{where}: {first.get('msg', 'invalid')}", details=exc.errors()
        )

    def _found(job: JobRecord | None, job_id: str) -> JobRecord:
        if job is None:
            raise ApiError(404, "NOT_FOUND", f"no job {job_id}")
        return job

    def _count_refusal(status: int) -> None:
        if status == 429:
            stats.add("refused_429")

    v1 = APIRouter(prefix="/v1", dependencies=[Depends(require_bearer)])

    @v1.post("/jobs", status_code=201)
    async def submit(body: SubmitIn, request: Request) -> JobOut:
        stats.add("submits")
        injected = faults.take_submit_status()
        if injected is not None:
            retry = _RETRY_AFTER_S if injected == 429 or injected >= 500 else None
            _count_refusal(injected)
            raise ApiError(injected, "SIM.INJECTED_STATUS", f"injected HTTP {injected}", retry_after=retry)
        if store.count(*WAITING) >= faults.tuning(config).max_queued:
            _count_refusal(429)
            raise ApiError(429, "RATE_LIMIT.QUEUE_FULL", "too many jobs waiting", retry_after=_RETRY_AFTER_S)
        fail = faults.take("fail_next")
        defect = next((kind for kind in DEFECTS if faults.take(f"{kind}_video")), None)
        if body.webhook_url and faults.take("webhook_before_response"):  # first event before the answer
            job = await asyncio.to_thread(service.create, body, fail_injected=fail, announce_now=True,
                                          defect=defect)
        else:
            job = service.create(body, fail_injected=fail, defect=defect)
        stats.add("jobs_created")
        stats.peak("max_alive", store.count(*ALIVE))
        clock.wake()
        if faults.take("submit_hang_after_create"):
            await _hold_answer(request, config.hang_s)
        return service.view(job)

    def _outage(name: str) -> None:
        if faults.in_outage(name):
            raise ApiError(503, "SIM.OUTAGE", "service temporarily unavailable", retry_after=_RETRY_AFTER_S)

    @v1.get("/jobs/{job_id}")
    def get_job(job_id: str) -> JobOut:
        stats.add("status_calls")
        _outage("status_outage_s")
        if faults.in_outage("status_missing_s"):
            raise ApiError(404, "NOT_FOUND", f"no job {job_id}")
        job = _found(store.get(job_id), job_id)
        return service.view(job, dead_url=job.status == "succeeded" and faults.take("expire_output_urls"))

    @v1.get("/jobs")
    def list_jobs(request_key: str) -> JobList:
        _outage("list_outage_s")
        return JobList(data=[service.view(j) for j in store.list(request_key)])

    @v1.post("/jobs/{job_id}/cancel")
    def cancel(job_id: str) -> JobOut:
        _outage("cancel_outage_s")
        job = _found(service.cancel(job_id), job_id)
        clock.wake()  # a running slot may be free
        return service.view(job)

    app.include_router(v1)

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
