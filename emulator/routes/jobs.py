"""`/v1/jobs`: the emulator's own provider-style API (README.md). Engine refusals propagate to the
app's handler (emulator/errors.py), which answers them in this API's shape."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Header, Request

from adapters.providers.emulator_api import JobList, JobOut, SubmitIn
from emulator.engine import Engine
from emulator.errors import ApiError
from emulator.service import JobService
from emulator.store import JobStore


def require_bearer(authorization: str | None = Header(default=None)) -> None:
    """Any non-empty bearer token is accepted: the emulator checks the shape, not the key."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "AUTH.MISSING_TOKEN", "Authorization: Bearer <key> required")


def jobs_router(engine: Engine, service: JobService, store: JobStore) -> APIRouter:
    v1 = APIRouter(prefix="/v1", dependencies=[Depends(require_bearer)])

    @v1.post("/jobs", status_code=201)
    async def submit(body: SubmitIn, request: Request) -> JobOut:
        return service.view(await engine.submit(body, request))

    @v1.get("/jobs/{job_id}")
    def get_job(job_id: str) -> JobOut:
        return engine.status(job_id)

    @v1.get("/jobs")
    def list_jobs(request_key: str) -> JobList:
        engine.outage("list_outage_s")
        return JobList(data=[service.view(j) for j in store.list(request_key)])

    @v1.post("/jobs/{job_id}/cancel")
    def cancel(job_id: str) -> JobOut:
        return engine.cancel(job_id)

    return v1
