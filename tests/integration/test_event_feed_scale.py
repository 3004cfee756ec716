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

PER_TASK = 3000  # x 20 tasks: 60,000 events of another tenant


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
    # a valid history of 3,000 moves per task (validated, refused, again), the tasks' moves interleaved
    # in id order as those of tasks that run at the same time are
    with db.transaction() as session:
        session.execute(text("""
            INSERT INTO state_events (task_id, source, source_event_id, event, from_status, to_status,
                                      task_version, applied, payload)
            SELECT t.id, 'test', 'feed-scale-' || t.id || '-' || n,
                   CASE WHEN n = 1 THEN 'validation_started' WHEN n % 2 = 0 THEN 'validation_failed'
                        ELSE 'revalidate' END,
                   CASE WHEN n = 1 THEN 'CREATED' WHEN n % 2 = 0 THEN 'VALIDATING' ELSE 'INVALID' END,
                   CASE WHEN n % 2 = 0 THEN 'INVALID' ELSE 'VALIDATING' END, n, true, '{}'::jsonb
              FROM tasks t CROSS JOIN generate_series(1, :per_task) AS n
             WHERE t.id = ANY(CAST(:tasks AS text[]))
             ORDER BY n, t.id"""), {"tasks": busy_tasks, "per_task": PER_TASK})
        session.execute(text("UPDATE tasks SET status = 'INVALID', version = :per_task "
                             "WHERE id = ANY(CAST(:tasks AS text[]))"), {"tasks": busy_tasks, "per_task": PER_TASK})
    with db.engine.connect() as connection:
        connection.execution_options(isolation_level="AUTOCOMMIT").execute(text("ANALYZE state_events, tasks"))
    with db.transaction() as session:
        task_store.transition(session, quiet_tasks[0], TaskEvent.VALIDATION_STARTED, source="test",
                              source_event_id=f"{quiet_tasks[0]}:feed-scale")
    with db.transaction() as session:
        now = event_feed.now_cursor(session)
    with db.transaction() as session:  # one more event of the busy tenant after `now`
        task_store.transition(session, busy_tasks[0], TaskEvent.REVALIDATE, source="test",
                              source_event_id=f"{busy_tasks[0]}:feed-scale")
    for cursor in (event_feed.EMPTY, "3:3:", now.encode()):
        with db.transaction() as session:
            before = _rows_read(session)
            events, _ = event_feed.read(session, quiet, event_feed.Cursor.parse(cursor))
            read = _rows_read(session) - before
        assert [e.task_id for e in events] == ([quiet_tasks[0]] if cursor != now.encode() else [])
        assert read < 1000, f"from {cursor}: {read} state_events rows read for a tenant with {len(events)} events"
