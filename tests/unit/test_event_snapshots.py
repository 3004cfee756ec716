"""The event cursor's snapshots read in Python (schema/event_feed.py `Snapshot`), as the gateway feed
uses them to hand a stream what it has not seen: `shows` agrees with pg_visible_in_snapshot for
committed transactions, and `covers` with "shows everything the other shows", on snapshots of one
history of transactions taken one after another (what Postgres hands out)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from schema.event_feed import EMPTY, Cursor, Snapshot


def test_shows_reads_a_snapshot_as_postgres_does() -> None:
    snap = Snapshot.of("10:15:11,13")
    assert [x for x in range(1, 20) if snap.shows(x)] == [*range(1, 10), 10, 12, 14]
    assert not any(Snapshot.of(EMPTY).shows(x) for x in range(1, 5))


def test_a_later_snapshot_covers_an_earlier_one_and_not_the_other_way() -> None:
    early, late = Snapshot.of("10:15:11,13"), Snapshot.of("13:18:13,16")
    assert late.covers(early) and not early.covers(late)
    assert early.later(late) is late and late.later(early) is late
    assert early.covers(early)
    assert Snapshot.of("10:15:11,13").covers(Snapshot.of(EMPTY))


def test_todays_cursors_still_parse() -> None:
    for text in ("1:1:", "740:745:741,743", "740:745:741,743/750:750:/9912"):
        assert Cursor.parse(text).encode() == text


@st.composite
def _history(draw: st.DrawFn) -> tuple[list[Snapshot], list[set[int]]]:
    """Transactions 1..n start in order and commit in a drawn order; a snapshot is taken after each
    step: what it shows is what had committed by then."""
    n = draw(st.integers(1, 12))
    order = draw(st.permutations(range(1, n + 1)))
    started, committed, snapshots, shown = 0, set(), [], []
    for xid in order:
        while started < xid:
            started += 1
            running = [x for x in range(1, started + 1) if x not in committed]
            snapshots.append(_snapshot(running, started + 1))
            shown.append(set(committed))
        committed.add(xid)
        running = [x for x in range(1, started + 1) if x not in committed]
        snapshots.append(_snapshot(running, started + 1))
        shown.append(set(committed))
    return snapshots, shown


def _snapshot(running: list[int], xmax: int) -> Snapshot:
    xmin = min(running, default=xmax)
    return Snapshot.of(f"{xmin}:{xmax}:{','.join(map(str, running))}")


@given(_history())
def test_covers_is_shows_everything_the_other_shows(history: tuple[list[Snapshot], list[set[int]]]) -> None:
    snapshots, shown = history
    universe = set().union(*shown) | {1}
    for snap, committed in zip(snapshots, shown, strict=True):
        assert {x for x in universe if snap.shows(x)} == committed
    for i, a in enumerate(snapshots):
        for j, b in enumerate(snapshots):
            assert a.covers(b) == (shown[j] <= shown[i]), (a.text, b.text)
            if i >= j:
                assert a.later(b).covers(b) and a.later(b).covers(a)
