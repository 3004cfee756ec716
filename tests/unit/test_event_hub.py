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
