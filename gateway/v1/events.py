"""`GET /v1/events`: a tenant's task state changes as Server-Sent Events, resumable with
`Last-Event-ID` from the state events table (schema/event_feed.py): no event is lost or repeated
across a reconnect or a gateway restart. Clients fall back to `GET /v1/generations/{id}`."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Annotated

import anyio
from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from gateway.deps import GatewayDeps, gateway_deps
from gateway.problems import ProblemError
from gateway.tenancy import Principal, require_tenant
from schema import event_feed, queries
from schema.db import Database
from schema.models import Task

router = APIRouter(tags=["events"])
POLL_S = 0.5
KEEPALIVE_S = 15.0
STREAM_S = 300.0  # then the stream ends; the client reconnects with Last-Event-ID
RETRY_MS = 1000
PAGE = 200


class EventPage(BaseModel):
    """The answer without `Accept: text/event-stream`: the next events at once, and where to go on."""

    events: list[event_feed.FeedEvent]
    last_event_id: str  # send it back as Last-Event-ID for the events after these


@router.get("/events", response_model=EventPage,
            responses={200: {"content": {"text/event-stream": {}},
                             "description": "with `Accept: text/event-stream`: state events as SSE"}})
async def events(
    request: Request,
    principal: Annotated[Principal, Depends(require_tenant)],
    deps: Annotated[GatewayDeps, Depends(gateway_deps)],
    task_id: Annotated[str | None, Query(max_length=64, pattern=r"^[0-9a-zA-Z_-]+$")] = None,
    import_id: Annotated[str | None, Query(max_length=40, pattern=r"^[0-9a-zA-Z_-]+$")] = None,
    last_event_id: Annotated[str | None, Header(max_length=event_feed.MAX_CURSOR_CHARS)] = None,
) -> StreamingResponse | EventPage:
    """With `Accept: text/event-stream`, a stream: each event has `id` (send it back as Last-Event-ID),
    `event: state`, `data` the transition as JSON; it ends after a few minutes: reconnect with
    Last-Event-ID. Otherwise one page of the next events as JSON (polling). Filtered by `task_id`
    or `import_id`, events start at the beginning of that history; the tenant-wide ones start now."""
    tenant = principal.tenant_id
    if not await run_in_threadpool(_owned, deps.db, tenant, task_id, import_id):
        raise ProblemError(404, "no such task or import", slug="not-found")
    try:
        start = event_feed.Cursor.parse(last_event_id) if last_event_id else None
        if start is not None:
            await run_in_threadpool(_check, deps.db, start)
    except event_feed.BadCursor as exc:
        raise ProblemError(400, str(exc), slug="bad-event-id") from exc
    if start is None:
        start = (event_feed.Cursor(seen=event_feed.EMPTY) if task_id or import_id
                 else await run_in_threadpool(_now, deps.db))
    if "text/event-stream" not in request.headers.get("accept", ""):
        page, after = await run_in_threadpool(_read, deps.db, tenant, start, task_id, import_id)
        return EventPage(events=page, last_event_id=after.encode())
    return StreamingResponse(_stream(request, deps.db, tenant, start, task_id, import_id),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


async def _stream(request: Request, db: Database, tenant: str, cursor: event_feed.Cursor, task_id: str | None,
                  import_id: str | None) -> AsyncIterator[str]:
    yield f"retry: {RETRY_MS}\n\n"
    ends, quiet_since = time.monotonic() + STREAM_S, time.monotonic()
    while time.monotonic() < ends and not await request.is_disconnected():
        batch, cursor = await run_in_threadpool(_read, db, tenant, cursor, task_id, import_id)
        for event in batch:
            yield f"id: {event.id}\nevent: state\ndata: {event.model_dump_json(exclude={'id'})}\n\n"
        if batch:
            quiet_since = time.monotonic()
            if len(batch) == PAGE:
                continue
        elif time.monotonic() - quiet_since > KEEPALIVE_S:
            # an id without data moves the client's Last-Event-ID on (nothing is dispatched), so a
            # quiet stream resumes from a recent snapshot instead of scanning from an old one
            yield f"id: {cursor.encode()}\n: keep-alive\n\n"
            quiet_since = time.monotonic()
        await anyio.sleep(POLL_S)


def _read(db: Database, tenant: str, cursor: event_feed.Cursor, task_id: str | None,
          import_id: str | None) -> tuple[list[event_feed.FeedEvent], event_feed.Cursor]:
    with db.transaction() as session:
        return event_feed.read(session, tenant, cursor, task_id=task_id, import_id=import_id, limit=PAGE)


def _check(db: Database, cursor: event_feed.Cursor) -> None:
    with db.transaction() as session:
        event_feed.check(session, cursor)


def _now(db: Database) -> event_feed.Cursor:
    with db.transaction() as session:
        return event_feed.now_cursor(session)


def _owned(db: Database, tenant: str, task_id: str | None, import_id: str | None) -> bool:
    """The filters name this tenant's task and import (another tenant's answer as missing ones do)."""
    with db.transaction() as session:
        if task_id is not None:
            task = session.get(Task, task_id)
            if task is None or task.tenant_id != tenant:
                return False
        return import_id is None or queries.import_exists(session, import_id, tenant)
