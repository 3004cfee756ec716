"""A tenant's state events in commit order, resumable from a cursor (`GET /v1/events`).

An event id is taken from a sequence before its transaction commits, so a smaller id can become
visible after a larger one: "every id above the last one seen" would lose it. The cursor is made of
Postgres snapshots instead (`state_events.xid` is the writing transaction, migration 0009):
`seen` is a snapshot whose visible events were all delivered; a batch is what a later snapshot
shows that `seen` did not, delivered in id order, `after` the last id delivered of it. Resuming
finishes the batch, then takes the next snapshot. Old events (no xid) count as committed before any
snapshot. `read` is one stream's (or one poll's) read; `read_all` is the gateway feed's, every
tenant's events at once, which the gateway hands to its streams (gateway/event_hub.py) with the
same cursors. Docs: docs/architecture.md, "Live status".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from sqlalchemy import Select, and_, func, select, text, true
from sqlalchemy.exc import DataError
from sqlalchemy.orm import Session

from schema.import_scope import in_import
from schema.models import CatalogImport, ImportTask, StateEvent, Task

EMPTY = "1:1:"  # a snapshot in which no transaction is visible: the start of history
MAX_CURSOR_CHARS = 8192
_MAX_ID = 2**63 - 1
_SNAPSHOT = r"\d{1,20}:\d{1,20}:(?:\d{1,20}(?:,\d{1,20})*)?"
_CURSOR = re.compile(rf"^({_SNAPSHOT})(?:/({_SNAPSHOT})/(\d{{1,20}}))?$")


class BadCursor(ValueError):
    pass


class Cursor(BaseModel):
    seen: str  # every applied event visible in this snapshot was delivered
    batch: str | None = None  # the snapshot being delivered, if one is under way
    after: int = 0  # the last event id of `batch` delivered

    def encode(self) -> str:
        return self.seen if self.batch is None else f"{self.seen}/{self.batch}/{self.after}"

    @classmethod
    def parse(cls, value: str) -> Cursor:
        """Refused (BadCursor) unless Postgres would read both snapshots: 1 <= xmin <= xmax, the
        running ids ascending within [xmin, xmax), every number a bigint."""
        match = _CURSOR.match(value) if len(value) <= MAX_CURSOR_CHARS else None
        if match is None or not all(_snapshot_ok(s) for s in match.groups()[:2] if s is not None) \
                or int(match.group(3) or 0) > _MAX_ID:
            raise BadCursor("Last-Event-ID is not an event id of this stream")
        seen, batch, after = match.groups()
        return cls(seen=seen, batch=batch, after=int(after or 0))


def _snapshot_ok(snapshot: str) -> bool:
    xmin, xmax, running = snapshot.split(":")
    ids = [int(x) for x in running.split(",") if x]
    low, high = int(xmin), int(xmax)
    return 1 <= low <= high <= _MAX_ID and all(low <= x < high for x in ids) and ids == sorted(set(ids))


@dataclass(frozen=True)
class Snapshot:
    """A Postgres snapshot read in Python: which transactions' events it shows (as
    pg_visible_in_snapshot does for committed ones, the only ones with events)."""

    text: str
    xmin: int
    xmax: int
    running: frozenset[int]

    @classmethod
    def of(cls, value: str) -> Snapshot:
        xmin, xmax, running = value.split(":")
        return cls(value, int(xmin), int(xmax), frozenset(int(x) for x in running.split(",") if x))

    def shows(self, xid: int) -> bool:
        return xid < self.xmin or (xid < self.xmax and xid not in self.running)

    def covers(self, other: Snapshot) -> bool:
        """Every transaction `other` shows, this one shows too (it was taken at the same time or later)."""
        return (all(x in other.running for x in self.running if x < other.xmax)
                and sum(1 for x in other.running if x >= self.xmax) >= other.xmax - self.xmax)

    def later(self, other: Snapshot) -> Snapshot:
        """Of two snapshots, the one that shows what both show (`other` unless this one covers it)."""
        return self if self.covers(other) else other


class FeedEvent(BaseModel):
    """What the stream sends per state change (`id` is the cursor just after it)."""

    id: str
    event_id: int
    task_id: str
    import_id: str
    event: str
    from_status: str
    to_status: str
    version: int
    attempt_no: int | None
    at: str


def now_cursor(session: Session) -> Cursor:
    """From this moment on: nothing committed so far is sent."""
    return Cursor(seen=session.scalar(text("SELECT pg_current_snapshot()::text")))


def check(session: Session, cursor: Cursor) -> None:
    """BadCursor unless Postgres reads the cursor's snapshots and none is ahead of the present (a
    forged position from the future would hide events until then)."""
    for snapshot in (cursor.seen, cursor.batch):
        if snapshot is None:
            continue
        try:
            with session.begin_nested():
                ahead = session.scalar(text("SELECT pg_snapshot_xmax(CAST(:s AS pg_snapshot)) > "
                                            "pg_snapshot_xmax(pg_current_snapshot())"), {"s": snapshot})
        except DataError as exc:
            raise BadCursor("Last-Event-ID is not an event id of this stream") from exc
        if ahead:
            raise BadCursor("Last-Event-ID is ahead of every event of this stream")


def read(session: Session, tenant_id: str, cursor: Cursor, *, task_id: str | None = None,
         import_id: str | None = None, limit: int = 200, upto: str | None = None) -> tuple[list[FeedEvent], Cursor]:
    """The next events after `cursor` (at most `limit`), and the cursor to read on from. A new batch
    is what `upto` shows (default: the present), so a stream can catch up to where its feed is."""
    batch = cursor.batch or upto or session.scalar(text("SELECT pg_current_snapshot()::text"))
    stmt = _scoped(select(StateEvent, Task.import_id).join(Task, Task.id == StateEvent.task_id), tenant_id,
                   task_id, import_id)
    # `id + 0`: no walk of the primary key in id order until `limit` rows of this tenant turn up
    # (past every other tenant's events when this one has few); the rows are found by the
    # tenant's, task's or import's tasks, or by the cursor's xid range, then sorted.
    stmt = stmt.where(StateEvent.applied.is_(True), StateEvent.id > cursor.after if cursor.batch else true(),
                      _new_in(cursor.seen, batch)).order_by(StateEvent.id + 0).limit(limit)
    rows = session.execute(stmt.params(seen=cursor.seen, batch=batch)).all()
    events: list[FeedEvent] = []
    for n, (event, import_of_task) in enumerate(rows, 1):
        done = n == len(rows) and len(rows) < limit
        after = Cursor(seen=batch) if done else Cursor(seen=cursor.seen, batch=batch, after=event.id)
        events.append(_feed_event(event, import_of_task, after.encode()))
    if len(rows) < limit:
        return events, Cursor(seen=batch)
    return events, Cursor(seen=cursor.seen, batch=batch, after=rows[-1][0].id)


@dataclass(frozen=True)
class LiveEvent:
    """One event of the gateway feed, for every stream that may see it: whose it is, which imports
    cover its task, the transaction that wrote it, and its `data` as the stream sends it."""

    event_id: int
    xid: int
    tenant_id: str
    task_id: str
    imports: frozenset[str]
    data: bytes


def read_all(session: Session, cursor: Cursor, *, limit: int = 1000) -> tuple[list[LiveEvent], Cursor]:
    """Every tenant's next events after `cursor` (a snapshot taken now, never EMPTY: the feed starts
    at the present), at most `limit`, and the cursor to read on from."""
    batch = cursor.batch or session.scalar(text("SELECT pg_current_snapshot()::text"))
    linked = (select(func.array_agg(ImportTask.import_id)).where(ImportTask.task_id == StateEvent.task_id)
              .correlate(StateEvent).scalar_subquery())
    xid = text("coalesce(state_events.xid, '2'::xid8)::text::bigint")
    stmt = (select(StateEvent, Task.import_id, Task.tenant_id, xid, linked).join(Task, Task.id == StateEvent.task_id)
            .where(StateEvent.applied.is_(True), StateEvent.id > cursor.after if cursor.batch else true(),
                   _new_in(cursor.seen, batch)).order_by(StateEvent.id).limit(limit))
    rows = session.execute(stmt.params(seen=cursor.seen, batch=batch)).all()
    events = [LiveEvent(event.id, xid_value, tenant, event.task_id, frozenset([import_of_task, *(others or ())]),
                        _feed_event(event, import_of_task, "").model_dump_json(exclude={"id"}).encode())
              for event, import_of_task, tenant, xid_value, others in rows]
    if len(rows) < limit:
        return events, Cursor(seen=batch)
    return events, Cursor(seen=cursor.seen, batch=batch, after=rows[-1][0].id)


def _scoped(stmt: Select, tenant_id: str, task_id: str | None, import_id: str | None) -> Select:
    """The tenant's tasks are found through its imports (every task has one; `tasks` has no index on
    the tenant), so a tenant-wide read touches this tenant's rows."""
    stmt = stmt.where(Task.tenant_id == tenant_id,
                      Task.import_id.in_(select(CatalogImport.id).where(CatalogImport.tenant_id == tenant_id)))
    if task_id is not None:
        stmt = stmt.where(StateEvent.task_id == task_id)
    if import_id is not None:
        stmt = stmt.where(in_import(import_id))
    return stmt


def _new_in(seen: str, batch: str) -> Any:  # noqa: ANN401 - a SQL condition
    """Written by a transaction visible in `batch` but not in `seen` (no xid: visible in any real snapshot)."""
    xid = "coalesce(state_events.xid, '2'::xid8)"
    visible_in_batch = text(f"pg_visible_in_snapshot({xid}, CAST(:batch AS pg_snapshot))")
    not_seen = text(f"NOT pg_visible_in_snapshot({xid}, CAST(:seen AS pg_snapshot))")
    if seen == EMPTY:
        return and_(visible_in_batch, not_seen)
    # the index on xid: anything not visible in `seen` has an xid at or above its xmin
    from_xmin = text("state_events.xid >= pg_snapshot_xmin(CAST(:seen AS pg_snapshot))")
    return and_(from_xmin, visible_in_batch, not_seen)


def _feed_event(event: StateEvent, import_id: str, cursor: str) -> FeedEvent:
    return FeedEvent(id=cursor, event_id=event.id, task_id=event.task_id, import_id=import_id, event=event.event,
                     from_status=event.from_status, to_status=event.to_status, version=event.task_version,
                     attempt_no=event.attempt_no, at=event.created_at.isoformat())
