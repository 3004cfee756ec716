"""The gateway's one feed handing events to its streams (gateway/event_hub.py), on scripted reads of
the feed instead of Postgres: each stream gets its tenant's events that it wants, with the cursors a
stream's own read would have made, sealed for its tenant; a stream whose position is ahead of the
feed's gets only what its snapshot does not show, until a batch covers it; a stream whose queue is
full is ended as slow."""

from __future__ import annotations

import asyncio

import pytest

from gateway import event_hub
from gateway.event_hub import QUEUE_MAX, EventHub, Stream
from gateway.event_ids import EventIds
from gateway.tenancy import Principal
from schema.event_feed import Cursor, LiveEvent

IDS = EventIds(b"k" * 32)


def _event(event_id: int, xid: int, tenant: str = "t1", task: str = "task-a", imports: tuple[str, ...] = ("imp",)
           ) -> LiveEvent:
    return LiveEvent(event_id, xid, tenant, task, frozenset(imports), f'{{"event_id": {event_id}}}'.encode())


def _stream(tenant: str = "t1", task: str | None = None, import_id: str | None = None) -> Stream:
    return Stream(Principal(tenant_id=tenant, key_id=f"key-{tenant}"), task, import_id)


def _ids(stream: Stream) -> list[str]:
    """The cursors of the ids the stream was sent, each opened for the stream's tenant."""
    return [IDS.open(stream.tenant_id, chunk.split(b"\n")[0].decode().removeprefix("id: ")).encode()
            for chunk in stream.queue]


class _Drained(Stream):
    """A stream whose client reads as fast as it is written to."""

    written = 0

    def put(self, chunk: bytes) -> None:
        self.written += 1


@pytest.fixture
def feed(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[LiveEvent], Cursor]]:
    """The reads the feed will make, in order (each: its events and the cursor after them)."""
    pages: list[tuple[list[LiveEvent], Cursor]] = []
    monkeypatch.setattr(event_hub, "read_feed", lambda db, cursor, limit: pages.pop(0))
    monkeypatch.setattr(EventHub, "_now", lambda self: "10:10:")
    monkeypatch.setattr(EventHub, "_start", lambda self: None)  # the test reads the feed itself
    return pages


def test_each_stream_gets_what_it_wants_with_the_feed_s_cursors(feed) -> None:  # noqa: ANN001
    async def run() -> tuple[Stream, ...]:
        hub = EventHub(db=None, ids=IDS)  # type: ignore[arg-type]
        streams = (_stream(), _stream(task="task-b"), _stream(import_id="imp"), _stream("t2"))
        for stream in streams:
            assert (await hub.join(stream, Cursor(seen="1:1:"))).text == "10:10:"
        feed.append(([_event(7, 10, task="task-a"), _event(8, 10, task="task-b", imports=("other",))],
                     Cursor(seen="10:10:", batch="12:12:", after=8)))  # one batch in two pages
        feed.append(([_event(9, 11)], Cursor(seen="12:12:")))
        await hub._read_batch()
        assert hub._seen is not None and hub._seen.text == "12:12:"
        for stream in streams:
            hub.leave(stream)
        return streams

    everything, task_b, of_import, other_tenant = asyncio.run(run())
    assert _ids(everything) == ["10:10:/12:12:/7", "10:10:/12:12:/8", "10:10:/12:12:/9"]
    assert _ids(task_b) == ["10:10:/12:12:/8"]
    assert _ids(of_import) == ["10:10:/12:12:/7", "10:10:/12:12:/9"]
    assert not other_tenant.queue


def test_a_stream_ahead_of_the_feed_gets_only_what_its_snapshot_does_not_show(feed) -> None:  # noqa: ANN001
    async def run() -> Stream:
        hub = EventHub(db=None, ids=IDS)  # type: ignore[arg-type]
        ahead = _stream()
        await hub.join(ahead, Cursor(seen="11:13:11"))  # shows 10 and 12, not 11: later than 10:10:
        assert ahead.own is not None
        feed.append(([_event(5, 10), _event(6, 11), _event(7, 12)], Cursor(seen="12:12:")))
        await hub._read_batch()
        assert ahead.own is not None  # 12:12: does not show 12, which the stream's snapshot shows
        feed.append(([_event(8, 12), _event(9, 13)], Cursor(seen="14:14:")))
        await hub._read_batch()
        assert ahead.own is None  # covered: from now on the feed's position is the stream's
        feed.append(([_event(10, 14)], Cursor(seen="15:15:")))
        await hub._read_batch()
        return ahead

    assert _ids(asyncio.run(run())) == ["11:13:11/12:12:/6", "11:13:11/14:14:/9", "14:14:/15:15:/10"]


def test_a_stream_whose_queue_is_full_is_ended_as_slow(feed) -> None:  # noqa: ANN001
    async def run() -> tuple[Stream, Stream]:
        hub = EventHub(db=None, ids=IDS)  # type: ignore[arg-type]
        slow, reading = _stream(), _Drained(Principal(tenant_id="t1", key_id="key-t1"), None, None)
        for stream in (slow, reading):
            await hub.join(stream, Cursor(seen="1:1:"))
        feed.append(([_event(n, 10) for n in range(1, QUEUE_MAX + 2)], Cursor(seen="11:11:")))
        await hub._read_batch()
        assert reading.written == QUEUE_MAX + 1
        return slow, reading

    slow, reading = asyncio.run(run())
    assert slow.ended == "slow" and len(slow.queue) == QUEUE_MAX
    assert reading.ended is None


async def _open(hub: EventHub, send):  # noqa: ANN001, ANN202
    """One `GET /v1/events` answer on the hub, its task parked once its catch-up is done."""
    from gateway.v1.events import EventStream

    hub.leases.give_back = lambda tenant_id: None  # type: ignore[method-assign]
    hub.leases.renew = lambda: None  # type: ignore[method-assign]
    hub._revoked = lambda key_ids, sessions: set()  # type: ignore[method-assign]
    stream = _stream()
    gone = asyncio.Event()

    async def receive() -> dict:
        await gone.wait()
        return {"type": "http.disconnect"}

    answer = EventStream(hub, stream, Cursor(seen="10:10:"), media_type="text/event-stream")
    task = asyncio.get_running_loop().create_task(answer({"type": "http"}, receive, send))
    while stream.parked is None and not task.done():
        await asyncio.sleep(0)
    return stream, task, gone


def test_the_ticker_writes_a_quiet_stream_s_keep_alive_without_waking_its_task(feed) -> None:  # noqa: ANN001
    """A parked stream's keep-alive is the ticker's write (its task, asleep, makes no new objects
    that would live until the next keep-alive); an event after it is written after it."""
    async def run() -> list[tuple[bytes, bool]]:
        hub = EventHub(db=None, ids=IDS)  # type: ignore[arg-type]
        written: list[tuple[bytes, asyncio.Task | None]] = []

        async def send(message: dict) -> None:
            if message["type"] == "http.response.body":
                written.append((message["body"], asyncio.current_task()))

        stream, task, gone = await _open(hub, send)
        stream.last_put -= event_hub.KEEPALIVE_S
        waiter = stream.wake._waiters[0]  # the parked task's wait
        await hub._tick()
        await asyncio.sleep(0)
        assert stream.wake._waiters[0] is waiter and stream.parked is not None  # still the same wait
        stream.put(b"id: 1\nevent: state\ndata: {}\n\n")
        await asyncio.sleep(0.01)
        gone.set()
        await task
        return [(body, writer is task) for body, writer in written]

    written = asyncio.run(run())
    assert [(body.split(b"\n")[1], by_stream) for body, by_stream in written] == [
        (b"", True), (b": keep-alive", False), (b"event: state", True)]  # retry:, the ticker's, the event


def test_a_keep_alive_the_client_does_not_take_ends_the_stream_as_slow(feed, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(event_hub, "SEND_TIMEOUT_S", 0.0)

    async def run() -> Stream:
        hub = EventHub(db=None, ids=IDS)  # type: ignore[arg-type]
        stalled = asyncio.Event()

        async def send(message: dict) -> None:
            if message.get("body", b"").startswith(b"id: "):
                await stalled.wait()  # the client's socket is full

        stream, task, _ = await _open(hub, send)
        stream.last_put -= event_hub.KEEPALIVE_S
        await hub._tick()  # the keep-alive's write starts and waits
        await asyncio.sleep(0)
        assert stream.keepalive is not None and stream.ended is None
        await hub._tick()  # it waited SEND_TIMEOUT_S: the stream ends, its write given up
        await asyncio.wait_for(task, 5)
        assert stream.keepalive is None
        return stream

    assert asyncio.run(run()).ended == "slow"


def test_a_stream_that_joins_once_the_gateway_is_stopping_ends_at_once(feed) -> None:  # noqa: ANN001
    """SIGTERM between a stream's lease and its join (its first write, or the feed's first read, still
    under way) found no stream to end: the stream then joined and uvicorn waited for it for ever."""
    async def run() -> tuple[Stream, Stream]:
        hub = EventHub(db=None, ids=IDS)  # type: ignore[arg-type]
        joined, late = _stream(), _stream()
        await hub.join(joined, Cursor(seen="1:1:"))
        hub.end_all("shutdown")
        await hub.join(late, Cursor(seen="1:1:"))
        return joined, late

    joined, late = asyncio.run(run())
    assert (joined.ended, late.ended) == ("shutdown", "shutdown")
