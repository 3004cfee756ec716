"""`/v1/jobs`: the emulator's own provider-style API (README.md). Engine refusals propagate to the
app's handler (emulator/errors.py), which answers them in this API's shape."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from fastapi import APIRouter, Depends, Header, Query, Request

from adapters.providers.emulator_api import LIST_PAGE_MAX, JobList, JobOut, SubmitIn
from emulator.engine import Engine
from emulator.errors import ApiError
from emulator.service import JobService
from emulator.store import JobStore


def require_bearer(authorization: str | None = Header(default=None)) -> None:
    """Any non-empty bearer token is accepted: the emulator checks the shape, not the key."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "AUTH.MISSING_TOKEN", "Authorization: Bearer <key> required")


def jobs_router(engine: Engine, service: JobService, store: JobStore, other_keys: Sequence[str] = ()) -> APIRouter:
    """`other_keys`: request key prefixes of the jobs of other APIs (the dialects'), left out of the
    window listing as another provider's jobs would be."""
    v1 = APIRouter(prefix="/v1", dependencies=[Depends(require_bearer)])

    @v1.post("/jobs", status_code=201)
    async def submit(body: SubmitIn, request: Request) -> JobOut:
        return service.view(await engine.submit(body, request))

    @v1.get("/jobs/{job_id}")
    def get_job(job_id: str) -> JobOut:
        return engine.status(job_id)

    @v1.get("/jobs")
    def list_jobs(request_key: str | None = None, created_after: datetime | None = None,
                  offset: int = Query(0, ge=0), limit: int = Query(LIST_PAGE_MAX, ge=1, le=LIST_PAGE_MAX)) -> JobList:
        """By our request key, or the jobs created in a window, a page at a time (as Replicate's and
        Luma's listings are): the account's whole history is never one answer."""
        engine.outage("list_outage_s")
        if request_key is not None:
            return JobList(data=[service.view(j) for j in store.list(request_key)])
        if created_after is None:
            raise ApiError(400, "VALIDATION.LIST_FILTER", "give request_key or created_after")
        page = store.created_since(created_after.timestamp(), offset=offset, limit=limit + 1, other_prefixes=other_keys)
        return JobList(data=[service.view(j) for j in page[:limit]], has_more=len(page) > limit)

    @v1.post("/jobs/{job_id}/cancel")
    def cancel(job_id: str) -> JobOut:
        return engine.cancel(job_id)

    return v1
