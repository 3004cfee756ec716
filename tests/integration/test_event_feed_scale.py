"""The tenant-wide event feed on a table where another tenant has many events: reading one tenant's
events (also from the start of history, `Last-Event-ID: 1:1:`) reads that tenant's rows, not every
tenant's. Measured by the rows the transaction read from state_events (pg_stat_xact_user_tables)."""

from __future__ import annotations

import uuid
from pathlib import Path

from sqlalchemy import select, text
from stack_helpers import make_catalog, make_plan

from catalog.plan import load_plan
from catalog.service import run_import
from config.settings import Settings
from contracts.task import TaskEvent
from schema import event_feed, task_store
from schema.db import Database
from schema.models import Task

OTHERS_EVENTS = 60_000


def _import(stack: Settings, folder: Path, tenant: str, products: int) -> list[str]:
    folder.mkdir()
    catalog = make_catalog(folder, [(f"S-{n}", f"Lamp {n}", "A lamp") for n in range(products)])
    summary = run_import(stack, catalog, load_plan(make_plan(folder)), catalog=f"cat-{tenant}", tenant=tenant)
    with Database(stack.database_url).transaction() as session:
        return list(session.scalars(select(Task.id).where(Task.import_id == summary.import_id)))


def _rows_read(session) -> int:  # noqa: ANN001 - Session
    return session.execute(text("SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) "
                                "FROM pg_stat_xact_user_tables WHERE relname = 'state_events'")).scalar_one()


def test_a_tenant_wide_read_from_the_start_reads_that_tenants_rows(stack: Settings, tmp_path: Path) -> None:
    busy, quiet = f"feed-busy-{uuid.uuid4().hex[:8]}", f"feed-quiet-{uuid.uuid4().hex[:8]}"
    busy_tasks = _import(stack, tmp_path / "busy", busy, 20)
    quiet_tasks = _import(stack, tmp_path / "quiet", quiet, 1)
    db = Database(stack.database_url)
    with db.transaction() as session:
        session.execute(text("""
            INSERT INTO state_events (task_id, source, source_event_id, event, from_status, to_status,
                                      task_version, applied, payload)
            SELECT (CAST(:tasks AS text[]))[1 + n % cardinality(CAST(:tasks AS text[]))], 'test',
                   'feed-scale-' || :tag || '-' || n, 'note', 'CREATED', 'CREATED', 1, true, '{}'::jsonb
              FROM generate_series(1, :count) AS n"""),
                        {"tasks": busy_tasks, "tag": busy, "count": OTHERS_EVENTS})
    with db.engine.connect() as connection:
        connection.execution_options(isolation_level="AUTOCOMMIT").execute(text("ANALYZE state_events, tasks"))
    with db.transaction() as session:
        task_store.transition(session, quiet_tasks[0], TaskEvent.VALIDATION_STARTED, source="test",
                              source_event_id=f"{quiet_tasks[0]}:feed-scale")
    with db.transaction() as session:
        now = event_feed.now_cursor(session)
    with db.transaction() as session:  # one more event of the busy tenant after `now`
        task_store.transition(session, busy_tasks[0], TaskEvent.VALIDATION_STARTED, source="test",
                              source_event_id=f"{busy_tasks[0]}:feed-scale")
    for cursor in (event_feed.EMPTY, "3:3:", now.encode()):
        with db.transaction() as session:
            before = _rows_read(session)
            events, _ = event_feed.read(session, quiet, event_feed.Cursor.parse(cursor))
            read = _rows_read(session) - before
        assert [e.task_id for e in events] == ([quiet_tasks[0]] if cursor != now.encode() else [])
        assert read < 1000, f"from {cursor}: {read} state_events rows read for a tenant with {len(events)} events"
