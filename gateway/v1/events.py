"""`GET /v1/events`: a tenant's task state changes as Server-Sent Events, resumable with
`Last-Event-ID` from the state events table (schema/event_feed.py): no event is lost or repeated
across a reconnect or a gateway restart. Clients fall back to `GET /v1/generations/{id}`."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.types import Receive, Scope, Send

from gateway.deps import GatewayDeps, gateway_deps
from gateway.problems import ProblemError
from gateway.tenancy import Principal, key_is_live, require_tenant
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
        page, after, _ = await run_in_threadpool(_read, deps.db, principal, start, task_id, import_id)
        return EventPage(events=page, last_event_id=after.encode())
    slots = _slots(request)
    if not slots.take(tenant, deps.api.max_streams_per_tenant):
        raise ProblemError(429, f"at most {deps.api.max_streams_per_tenant} event streams may be open at once; "
                                "close one, or poll without `Accept: text/event-stream`", slug="too-many-streams",
                           headers={"Retry-After": str(RETRY_MS // 1000 or 1)})
    return _HeldStream(_stream(request, deps.db, principal, start, task_id, import_id),
                       release=lambda: slots.give_back(tenant), media_type="text/event-stream",
                       headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


class StreamSlots:
    """Open event streams per tenant in this process: taken before a stream's answer, given back
    when it ends however it ends. Each open stream polls Postgres, so their number is capped."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, int] = {}

    def take(self, tenant: str, cap: int) -> bool:
        with self._lock:
            if self._open.get(tenant, 0) >= cap:
                return False
            self._open[tenant] = self._open.get(tenant, 0) + 1
            return True

    def give_back(self, tenant: str) -> None:
        with self._lock:
            left = self._open.get(tenant, 0) - 1
            if left > 0:
                self._open[tenant] = left
            else:
                self._open.pop(tenant, None)


def _slots(request: Request) -> StreamSlots:
    slots = getattr(request.app.state, "stream_slots", None)
    if slots is None:
        slots = request.app.state.stream_slots = StreamSlots()
    return slots


class _HeldStream(StreamingResponse):
    """A stream that gives its slot back once the response is over (ended, dropped or failed)."""

    def __init__(self, content: AsyncIterator[str], *, release: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


async def _stream(request: Request, db: Database, principal: Principal, cursor: event_feed.Cursor,
                  task_id: str | None, import_id: str | None) -> AsyncIterator[str]:
    """Ends after STREAM_S, when the client leaves, or at the first poll after its key was revoked."""
    yield f"retry: {RETRY_MS}\n\n"
    ends, quiet_since = time.monotonic() + STREAM_S, time.monotonic()
    while time.monotonic() < ends and not await request.is_disconnected():
        batch, cursor, key_live = await run_in_threadpool(_read, db, principal, cursor, task_id, import_id)
        if not key_live:
            return
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


def _read(db: Database, principal: Principal, cursor: event_feed.Cursor, task_id: str | None,
          import_id: str | None) -> tuple[list[event_feed.FeedEvent], event_feed.Cursor, bool]:
    """The next events, and whether the caller's key is still valid (nothing is read once it is not)."""
    with db.transaction() as session:
        if not key_is_live(session, principal.key_id):
            return [], cursor, False
        events, after = event_feed.read(session, principal.tenant_id, cursor, task_id=task_id,
                                        import_id=import_id, limit=PAGE)
        return events, after, True


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
