"""One feed of state events per gateway process, fanned out to its open `GET /v1/events` streams.

The feed reads every tenant's new events from Postgres every POLL_S while any stream is open
(`event_feed.read_all`: one query, whatever the number of streams) and puts each one, already
encoded, into the bounded queue of each stream of its tenant that wants it (its task or import).
A stream catches up from Postgres on its own once, from its Last-Event-ID to where the feed is when
it joins, and takes the feed's events from then on, with the same cursors as before (schema/
event_feed.py), so nothing is lost or repeated across a reconnect, on this gateway or another. Each
id is sealed for the stream's tenant (gateway/event_ids.py) as it is put in a queue.

One ticker per process (TICK_S) does what each stream used to do on its own: keep-alives after
KEEPALIVE_S of quiet (written by the ticker itself to a stream whose task is parked, so a quiet
stream's task stays asleep: `Stream.parked`), the end of a stream's time, one query for the keys
and browser sessions of every open stream (a revoked key's streams, a signed-out or expired
session's, end within a second) and the renewal of this gateway's stream lease (schema/
stream_leases.py). A stream whose client stops reading is ended: its write waited SEND_TIMEOUT_S, or
QUEUE_MAX events are waiting for it; the others are not held up (nothing waits for a stream's write).
Docs: docs/architecture.md, "Live status".
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.types import Message

from gateway.event_ids import EventIds
from gateway.tenancy import Principal, revoked_keys
from metrics import EVENT_FEED_QUERIES, EVENT_STREAMS, EVENT_STREAMS_ENDED
from schema import browser_sessions, event_feed, stream_leases
from schema.db import Database
from schema.event_feed import Cursor, LiveEvent, Snapshot

log = logging.getLogger("reelqueue.gateway.events")
T = TypeVar("T")

POLL_S = 0.25  # the feed's read: a new event reaches its streams within about this
TICK_S = 1.0  # keep-alives, ends, key checks
KEEPALIVE_S = 15.0
STREAM_S = 1800.0  # then the stream ends (+-20 %, so that reconnects spread); the client resumes
QUEUE_MAX = 1000  # events waiting for one stream's client; more and it is ended as too slow
SEND_TIMEOUT_S = 10.0  # one write that waits longer (the client's socket is full) ends the stream
PAGE = 1000  # events per read of the feed
RETRY_BACKOFF_S = 1.0  # after a failed read of the feed


class Stream:
    """One open stream: what it wants, where it is, and what waits to be written to it."""

    __slots__ = ("tenant_id", "key_id", "session", "task_id", "import_id", "own", "queue", "wake", "ended",
                 "sending", "last_put", "ends_at", "parked", "keepalive", "keepalive_at")

    def __init__(self, principal: Principal, task_id: str | None, import_id: str | None,
                 session: str | None = None) -> None:
        self.tenant_id, self.key_id = principal.tenant_id, principal.key_id
        self.session = session  # the sha256 of the browser session token it was opened with, if one
        self.task_id, self.import_id = task_id, import_id
        self.own: Snapshot | None = None  # its position while ahead of the feed's; None: the feed's
        self.queue: deque[bytes] = deque()
        self.wake = asyncio.Event()
        self.ended: str | None = None
        self.sending: asyncio.Timeout | None = None  # the write under way, if one is
        self.last_put = time.monotonic()
        self.ends_at = self.last_put + STREAM_S * random.uniform(0.8, 1.2)
        # While its task waits for the next chunk with nothing queued or being written: the ASGI
        # `send` the ticker writes a keep-alive with. Waking the task for each keep-alive instead
        # made the objects of each wait (its coroutine, future, iterator, wake-up callback) live the
        # 15 s between keep-alives, long enough for the garbage collector to move them to its oldest
        # generation: at 10,000 streams ~2,700 a second, which set off a full collection of every
        # stream's objects (1.7 M, 1.2-1.5 s of CPU with the loop stopped) every ~160 s when idle.
        self.parked: Callable[[Message], Awaitable[None]] | None = None
        self.keepalive: asyncio.Task[None] | None = None  # the ticker's keep-alive write under way
        self.keepalive_at = 0.0

    def wants(self, event: LiveEvent) -> bool:
        return ((self.task_id is None or event.task_id == self.task_id)
                and (self.import_id is None or self.import_id in event.imports))

    def put(self, chunk: bytes) -> None:
        if self.ended is not None:
            return
        if len(self.queue) >= QUEUE_MAX:
            self.end("slow")
            return
        self.queue.append(chunk)
        self.last_put = time.monotonic()
        self.wake.set()

    def leave_quietly(self) -> None:
        """Its client left: nothing more to write."""
        if self.ended is None:
            self.ended = "gone"
            self.wake.set()

    def end(self, why: str) -> None:
        """Ends the stream; a slow one's write under way is given up at once."""
        if self.ended is not None:
            return
        self.ended = why
        EVENT_STREAMS_ENDED.labels(why).inc()
        self.wake.set()
        if why == "slow" and self.sending is not None:
            self.sending.reschedule(asyncio.get_running_loop().time())
        if why == "slow" and self.keepalive is not None:
            self.keepalive.cancel()

    def write_keepalive(self, chunk: bytes) -> None:
        """The ticker's keep-alive, written to a parked stream without waking its task (which, woken
        by an event meanwhile, waits for this write before its own: `keepalive_done`)."""
        self.last_put = time.monotonic()
        self.keepalive_at = self.last_put
        self.keepalive = asyncio.get_running_loop().create_task(self._send_keepalive(self.parked, chunk))

    async def _send_keepalive(self, send: Callable[[Message], Awaitable[None]], chunk: bytes) -> None:
        try:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except asyncio.CancelledError:
            pass  # ended as too slow
        except Exception:  # noqa: BLE001 - the connection is broken: the stream ends as its client left
            self.leave_quietly()
        finally:
            self.keepalive = None

    async def keepalive_done(self) -> None:
        if self.keepalive is not None:
            await asyncio.wait({self.keepalive})


def state_line(cursor: str, data: bytes) -> bytes:
    return b"id: " + cursor.encode() + b"\nevent: state\ndata: " + data + b"\n\n"


def keepalive_line(cursor: str) -> bytes:
    # an id without data moves the client's Last-Event-ID on (nothing is dispatched), so a quiet
    # stream resumes from a recent snapshot instead of scanning from an old one
    return b"id: " + cursor.encode() + b"\n: keep-alive\n\n"


class StreamLeases:
    """This process's side of the cross-gateway stream cap: its lease id, and give-backs that could
    not be written yet (Postgres away), written again by the ticker."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.gateway_id = f"gw-{uuid.uuid4().hex[:16]}"
        self.host = socket.gethostname()
        self._owed: dict[str, int] = {}

    def take(self, tenant_id: str, cap: int) -> bool:
        with self.db.transaction() as session:
            return stream_leases.take(session, self.gateway_id, self.host, tenant_id, cap)

    def give_back(self, tenant_id: str) -> None:
        self._owed[tenant_id] = self._owed.get(tenant_id, 0) + 1
        self.settle()

    def renew(self) -> None:
        with self.db.transaction() as session:
            stream_leases.renew(session, self.gateway_id, self.host)
            if random.random() < stream_leases.RENEW_S / 60:  # about once a minute
                stream_leases.forget_expired(session)
        self.settle()

    def settle(self) -> None:
        if not self._owed:
            return
        owed, self._owed = self._owed, {}
        try:
            with self.db.transaction() as session:
                for tenant_id, ended in owed.items():
                    stream_leases.give_back(session, self.gateway_id, tenant_id, ended)
        except Exception:
            for tenant_id, ended in owed.items():
                self._owed[tenant_id] = self._owed.get(tenant_id, 0) + ended
            log.warning("stream leases: give-back not written yet (%d tenants)", len(owed), exc_info=True)


class EventHub:
    """The process's feed and its streams (one per app: `hub_of(app)`)."""

    def __init__(self, db: Database, ids: EventIds) -> None:
        self.db = db
        self.ids = ids  # every cursor put in a stream's queue is sealed for its tenant
        self.leases = StreamLeases(db)
        self._lock = asyncio.Lock()  # held by a join and by each read of the feed
        self._seen: Snapshot | None = None  # the feed's position; None while no stream is open
        self._cursor: Cursor | None = None  # its read: the position, or a batch half-way
        self._by_tenant: dict[str, set[Stream]] = {}
        self._ahead: set[Stream] = set()
        self._count = 0
        self._feed: asyncio.Task[None] | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._renewed = 0.0
        self._stopping: str | None = None  # why every stream ends (end_all), for those that join later

    @property
    def streams(self) -> int:
        return self._count

    async def join(self, stream: Stream, start: Cursor) -> Snapshot:
        """Registers the stream; returns the feed's position (the stream reads up to it on its own,
        then takes the feed's events). A stream whose position is later than the feed's (it comes
        from a gateway ahead of this one) keeps its own until the feed passes it."""
        async with self._lock:
            if self._stopping is not None:
                stream.end(self._stopping)
            if self._seen is None:
                self._seen = Snapshot.of(await _in_thread(self._now))
                self._cursor = Cursor(seen=self._seen.text)
            position = self._seen
            mine = Snapshot.of(start.batch or start.seen)
            if mine.covers(position):
                stream.own = mine
                self._ahead.add(stream)
            self._by_tenant.setdefault(stream.tenant_id, set()).add(stream)
            self._count += 1
            EVENT_STREAMS.inc()
            self._start()
            return position

    def leave(self, stream: Stream) -> None:
        streams = self._by_tenant.get(stream.tenant_id)
        if streams is None or stream not in streams:
            return
        streams.discard(stream)
        if not streams:
            del self._by_tenant[stream.tenant_id]
        self._ahead.discard(stream)
        self._count -= 1
        EVENT_STREAMS.dec()

    def end_all(self, why: str) -> None:
        """Ends every stream (the process is stopping): each client resumes on another gateway. A stream
        still on its way in (its lease taken, its join waiting) ends as it joins."""
        self._stopping = why
        for streams in self._by_tenant.values():
            for stream in streams:
                stream.end(why)

    def position(self, stream: Stream) -> str:
        return (stream.own or self._seen or Snapshot.of(event_feed.EMPTY)).text

    def _start(self) -> None:
        if self._feed is None or self._feed.done():
            self._feed = asyncio.get_running_loop().create_task(self._run_feed(), name="event-feed")
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.get_running_loop().create_task(self._run_ticker(), name="event-ticker")

    def _now(self) -> str:
        with self.db.transaction() as session:
            return event_feed.now_cursor(session).seen

    async def _run_feed(self) -> None:
        """Reads the feed while any stream is open; stops (and forgets its position) when none is.
        A batch is finished under the lock even when a read fails half-way (Postgres away: the
        streams wait, their positions intact), so a stream joins only at a batch's boundary."""
        while True:
            async with self._lock:
                while self._count:
                    try:
                        await self._read_batch()
                        break
                    except Exception:
                        log.warning("event feed: read failed; retrying", exc_info=True)
                        await asyncio.sleep(RETRY_BACKOFF_S)
                if not self._count:
                    self._seen = self._cursor = None
                    return
            await asyncio.sleep(POLL_S)

    async def _read_batch(self) -> None:
        """Everything committed since the feed's position, page by page, handed to the streams."""
        assert self._seen is not None and self._cursor is not None
        while True:
            events, cursor = await _in_thread(_counted, "feed", read_feed, self.db, self._cursor, PAGE)
            batch = Snapshot.of(cursor.batch or cursor.seen)
            self._fan_out(events, batch)
            self._cursor = cursor
            if cursor.batch is None:
                break
        for stream in [s for s in self._ahead if batch.covers(s.own)]:  # type: ignore[arg-type]
            stream.own = None
            self._ahead.discard(stream)
        self._seen = batch

    def _fan_out(self, events: list[LiveEvent], batch: Snapshot) -> None:
        seen = self._seen.text  # type: ignore[union-attr]
        for event in events:
            streams = self._by_tenant.get(event.tenant_id)
            if not streams:
                continue
            shared: bytes | None = None  # the same bytes for every stream at the feed's position
            for stream in streams:
                if not stream.wants(event):
                    continue
                if stream.own is None:
                    if shared is None:  # the streams are all of the event's tenant: one sealed id
                        shared = state_line(self.ids.seal(event.tenant_id, f"{seen}/{batch.text}/{event.event_id}"),
                                            event.data)
                    stream.put(shared)
                elif not stream.own.shows(event.xid):
                    cursor = f"{stream.own.text}/{batch.text}/{event.event_id}"
                    stream.put(state_line(self.ids.seal(stream.tenant_id, cursor), event.data))

    async def _run_ticker(self) -> None:
        while self._count:
            await asyncio.sleep(TICK_S)
            try:
                await self._tick()
            except Exception:
                log.warning("event streams: tick failed", exc_info=True)

    async def _tick(self) -> None:
        now = time.monotonic()
        streams = [s for tenant in self._by_tenant.values() for s in tenant]
        if now - self._renewed >= stream_leases.RENEW_S:
            self._renewed = now
            await _in_thread(_counted, "lease", self.leases.renew)
        revoked = await _in_thread(_counted, "keys", self._revoked, {s.key_id for s in streams},
                                   {s.session for s in streams if s.session})
        shared: dict[str, bytes] = {}  # per tenant: the feed's position sealed for it
        for stream in streams:
            if stream.key_id in revoked or stream.session in revoked:
                stream.end("revoked")
            elif now >= stream.ends_at:
                stream.end("expired")
            elif stream.keepalive is not None:
                if now - stream.keepalive_at >= SEND_TIMEOUT_S:  # its client stopped reading
                    stream.end("slow")
            elif now - stream.last_put >= KEEPALIVE_S and self._cursor is not None and self._cursor.batch is None:
                if stream.own is not None:
                    chunk = keepalive_line(self.ids.seal(stream.tenant_id, stream.own.text))
                else:
                    tenant = stream.tenant_id
                    if tenant not in shared:
                        shared[tenant] = keepalive_line(self.ids.seal(tenant, self.position(stream)))
                    chunk = shared[tenant]
                if stream.parked is not None and not stream.queue and stream.ended is None:
                    stream.write_keepalive(chunk)
                else:
                    stream.put(chunk)

    def _revoked(self, key_ids: set[str], sessions: set[str]) -> set[str]:
        """The revoked keys, and the ended (signed-out, expired) browser sessions, among the streams'."""
        with self.db.transaction() as session:
            return revoked_keys(session, key_ids) | browser_sessions.ended(session, sessions)


async def _in_thread(fn: Callable[..., T], *args: object) -> T:
    return await run_in_threadpool(fn, *args)


def _counted(query: str, fn: Callable[..., T], *args: object) -> T:
    try:
        result = fn(*args)
    except Exception:
        EVENT_FEED_QUERIES.labels(query, "error").inc()
        raise
    EVENT_FEED_QUERIES.labels(query, "ok").inc()
    return result


def read_feed(db: Database, cursor: Cursor, limit: int) -> tuple[list[LiveEvent], Cursor]:
    with db.transaction() as session:
        return event_feed.read_all(session, cursor, limit=limit)
