"""`GET /v1/events`: a tenant's task state changes as Server-Sent Events, resumable with
`Last-Event-ID` from the state events table (schema/event_feed.py): no event is lost or repeated
across a reconnect or a gateway restart. Every id a tenant gets is its cursor sealed for it
(gateway/event_ids.py): no Postgres snapshot leaves the gateway. A stream reads its own backlog,
then what the process's one feed hands it (gateway/event_hub.py); the tenant's cap counts its
streams on every gateway (schema/stream_leases.py). Clients fall back to `GET /v1/generations/{id}`."""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.types import Receive, Scope, Send

from gateway.deps import GatewayDeps, gateway_deps
from gateway.event_hub import SEND_TIMEOUT_S, EventHub, Stream, state_line
from gateway.event_ids import MAX_EVENT_ID_CHARS, EventIds
from gateway.problems import ProblemError
from gateway.tenancy import Principal, bearer_key, key_is_live, require_tenant
from schema import browser_sessions, event_feed, queries
from schema.db import Database
from schema.event_feed import Snapshot
from schema.models import Task
from schema.tenants import hash_key

router = APIRouter(tags=["events"])
log = logging.getLogger("reelqueue.gateway.events")
RETRY_MS = 1000
PAGE = 200  # events per read of one stream's catch-up (and of a JSON page)


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
    last_event_id: Annotated[str | None, Header(max_length=MAX_EVENT_ID_CHARS)] = None,
) -> StreamingResponse | EventPage:
    """With `Accept: text/event-stream`, a stream: each event has `id` (send it back as Last-Event-ID),
    `event: state`, `data` the transition as JSON; it ends after a few minutes: reconnect with
    Last-Event-ID. Otherwise one page of the next events as JSON (polling). Filtered by `task_id`
    or `import_id`, events start at the beginning of that history; the tenant-wide ones start now."""
    tenant, ids = principal.tenant_id, deps.event_ids
    if ids is None:
        raise ProblemError(503, "event ids cannot be sealed here: REELQUEUE_MEDIA_LINK_SECRET is not set",
                           slug="not-configured")
    if not await run_in_threadpool(_owned, deps.db, tenant, task_id, import_id):
        raise ProblemError(404, "no such task or import", slug="not-found")
    try:
        start = ids.open(tenant, last_event_id) if last_event_id else None
        if start is not None:
            await run_in_threadpool(_check, deps.db, start)
    except event_feed.BadCursor as exc:
        raise ProblemError(400, str(exc), slug="bad-event-id") from exc
    if start is None:
        start = (event_feed.Cursor(seen=event_feed.EMPTY) if task_id or import_id
                 else await run_in_threadpool(_now, deps.db))
    if "text/event-stream" not in request.headers.get("accept", ""):
        page, after, _ = await run_in_threadpool(_read, deps.db, principal.key_id, tenant, start, task_id, import_id)
        return EventPage(events=[e.model_copy(update={"id": ids.seal(tenant, e.id)}) for e in page],
                         last_event_id=ids.seal(tenant, after.encode()))
    if getattr(request.app.state, "events_stopping", False):  # gateway/__main__.py: SIGTERM
        raise ProblemError(503, "this gateway is stopping; open the stream again", slug="stopping",
                           headers={"Retry-After": str(RETRY_MS // 1000 or 1)})
    hub = hub_of(request.app, deps.db, ids)
    cap = deps.api.max_streams_per_tenant
    if not await run_in_threadpool(hub.leases.take, tenant, cap):
        raise ProblemError(429, f"at most {cap} event streams may be open at once; "
                                "close one, or poll without `Accept: text/event-stream`", slug="too-many-streams",
                           headers={"Retry-After": str(RETRY_MS // 1000 or 1)})
    bearer = bearer_key(request)  # a browser session's stream ends with the session, not only with its key
    session = hash_key(bearer) if bearer.startswith(browser_sessions.TOKEN_PREFIX) else None
    return EventStream(hub, Stream(principal, task_id, import_id, session), start, media_type="text/event-stream",
                       headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


def hub_of(app: Any, db: Database, ids: EventIds) -> EventHub:  # noqa: ANN401 - the FastAPI app
    """The app's one feed (made on its first stream)."""
    hub = getattr(app.state, "event_hub", None)
    if hub is None:
        hub = app.state.event_hub = EventHub(db, ids)
    return hub


class EventStream(StreamingResponse):
    """One stream as a plain ASGI answer: its own catch-up from Postgres, then what the feed puts in
    its queue. Its place under the tenant's cap is given back however it ends."""

    def __init__(self, hub: EventHub, stream: Stream, start: event_feed.Cursor, **kwargs: Any) -> None:
        super().__init__((), **kwargs)
        self._hub, self._stream, self._start = hub, stream, start

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        hub, stream = self._hub, self._stream
        listener = asyncio.get_running_loop().create_task(_until_gone(receive, stream))
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            if await self._write(send, f"retry: {RETRY_MS}\n\n".encode()):
                await self._catch_up(send, await hub.join(stream, self._start))
            while stream.ended is None:
                if not stream.queue:
                    stream.wake.clear()
                    stream.parked = send  # the ticker writes its keep-alives meanwhile
                    try:
                        await stream.wake.wait()
                    finally:
                        stream.parked = None
                    continue
                await stream.keepalive_done()  # the ticker's keep-alive goes out first
                chunk = b"".join(stream.queue)
                stream.queue.clear()
                await self._write(send, chunk)
            await stream.keepalive_done()
            if stream.ended in ("expired", "revoked", "shutdown"):
                await self._write(send, b"", more=False)
        finally:
            if stream.keepalive is not None:
                stream.keepalive.cancel()
            listener.cancel()
            hub.leave(stream)
            await run_in_threadpool(hub.leases.give_back, stream.tenant_id)

    async def _catch_up(self, send: Send, position: Snapshot) -> None:
        """From the client's position to the feed's (or, for a position ahead of the feed's, to the
        end of the client's batch): read from Postgres for this stream alone."""
        stream, cursor = self._stream, self._start
        upto = None if stream.own is not None else position.text
        while stream.ended is None and (cursor.batch is not None or (upto is not None and cursor.seen != upto)):
            batch, cursor, key_live = await run_in_threadpool(
                _read, self._hub.db, stream.key_id, stream.tenant_id, cursor, stream.task_id, stream.import_id, upto)
            if not key_live:
                stream.end("revoked")
                return
            seal = self._hub.ids.seal
            if batch and not await self._write(send, b"".join(
                    state_line(seal(stream.tenant_id, event.id), event.model_dump_json(exclude={"id"}).encode())
                    for event in batch)):
                return

    async def _write(self, send: Send, body: bytes, *, more: bool = True) -> bool:
        """False once the stream is ended as too slow (this write waited SEND_TIMEOUT_S, or the
        feed found its queue full meanwhile)."""
        try:
            async with asyncio.timeout(SEND_TIMEOUT_S) as timeout:
                self._stream.sending = timeout
                await send({"type": "http.response.body", "body": body, "more_body": more})
        except TimeoutError:
            self._stream.end("slow")
            log.info("event stream of tenant %s ended: its client stopped reading", self._stream.tenant_id)
            return False
        finally:
            self._stream.sending = None
        return True


async def _until_gone(receive: Receive, stream: Stream) -> None:
    """Waits for the client to leave (its stream then ends at once, giving its place back)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    stream.leave_quietly()


def _read(db: Database, key_id: str, tenant_id: str, cursor: event_feed.Cursor, task_id: str | None,
          import_id: str | None, upto: str | None = None) -> tuple[list[event_feed.FeedEvent], event_feed.Cursor, bool]:
    """The next events, and whether the caller's key is still valid (nothing is read once it is not)."""
    with db.transaction() as session:
        if not key_is_live(session, key_id):
            return [], cursor, False
        events, after = event_feed.read(session, tenant_id, cursor, task_id=task_id, import_id=import_id,
                                        limit=PAGE, upto=upto)
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
