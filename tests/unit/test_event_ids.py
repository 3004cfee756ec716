"""Event ids sealed for their tenant (gateway/event_ids.py): the cursor comes back only for the tenant
it was sealed for, under the current or the previous key; nothing of the snapshot shows, not even
its length; a plain, altered, foreign or oversized id is refused naming Last-Event-ID."""

from __future__ import annotations

import pytest

from gateway.event_ids import MAX_EVENT_ID_CHARS, PREFIX, EventIds
from schema.event_feed import MAX_CURSOR_CHARS, BadCursor

CURSOR = "1000:1009:1002,1005/1010:1012:1011/77"
IDS = EventIds(b"a" * 32)


def test_an_id_opens_for_its_tenant_only() -> None:
    sealed = IDS.seal("t1", CURSOR)
    assert IDS.open("t1", sealed).encode() == CURSOR
    assert sealed.startswith(PREFIX) and ":" not in sealed  # base64url: no snapshot text
    assert IDS.seal("t1", CURSOR) != sealed  # a fresh nonce each time
    for refused in (lambda: IDS.open("t2", sealed), lambda: EventIds(b"b" * 32).open("t1", sealed)):
        with pytest.raises(BadCursor, match="Last-Event-ID"):
            refused()


def test_plain_altered_and_oversized_ids_are_refused() -> None:
    sealed = IDS.seal("t1", CURSOR)
    altered = sealed[:-4] + ("AAAA" if not sealed.endswith("AAAA") else "BBBB")
    for bad in (CURSOR, "1:1:", altered, PREFIX, PREFIX + "@@@@", PREFIX + "A" * 10, "e1.\u00e9\u00e9\u00e9",
                PREFIX + "A" * MAX_EVENT_ID_CHARS):
        with pytest.raises(BadCursor, match="Last-Event-ID"):
            IDS.open("t1", bad)


def test_the_length_does_not_count_running_transactions() -> None:
    few = IDS.seal("t1", "1000:1001:")
    many = IDS.seal("t1", "1000:1100:" + ",".join(str(x) for x in range(1000, 1020)) + "/1100:1100:/5")
    assert len(few) == len(many)
    biggest = "1:9999999:" + ",".join(str(x) for x in range(1000000, 1000000 + 2000))
    biggest = biggest[:MAX_CURSOR_CHARS].rsplit(",", 1)[0]
    assert len(IDS.seal("t1", biggest)) <= MAX_EVENT_ID_CHARS


def test_ids_of_the_previous_key_open_while_it_is_kept() -> None:
    old = EventIds(b"a" * 32).seal("t1", CURSOR)
    rotated = EventIds(b"c" * 32, previous=b"a" * 32)
    assert rotated.open("t1", old).encode() == CURSOR
    with pytest.raises(BadCursor):
        EventIds(b"c" * 32).open("t1", old)
