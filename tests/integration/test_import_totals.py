"""Per-import totals (`import_totals`, `import_moves`, kept by the triggers of migration 0017) equal a
recount from the tasks, the ledger and the state events: through every kind of end, regenerated and
approved reviews, a redrive with a late ledger row, a reimport that reuses the tasks, many writers of
one import at once (no deadlock, no drift), and a migration that backfills and downgrades.
`reelqueue ledger check` reports a drift."""

from __future__ import annotations

import threading
import uuid
from decimal import Decimal

import pytest
from alembic import command
from cli_helpers import run_cli
from sqlalchemy import text
from stack_helpers import import_small
from test_db_upgrade import empty_database  # noqa: F401 - a fixture

from contracts.task import TaskEvent as E
from schema import queries
from schema.db import Database
from schema.import_totals import status_counts
from schema.import_totals_drift import drift
from schema.migrate import alembic_config, upgrade
from schema.models import Asset, CreditEntry, ReviewCheck
from schema.spend import import_spend
from schema.task_store import transition

pytestmark = pytest.mark.integration

TO_RUNNING = [E.VALIDATION_STARTED, E.VALIDATION_PASSED, E.QUEUED, E.DISPATCH_CLAIMED, E.PROVIDER_ACCEPTED,
              E.PROVIDER_RUNNING]
TO_PAID = [*TO_RUNNING, E.PROVIDER_SUCCEEDED, E.OUTPUT_PERSISTED]  # POST_PROCESSING, the video paid for


def _walk(db: Database, task_id: str, events: list[E], **updates) -> None:  # noqa: ANN003
    """Each event in its own transaction, as the workflow moves a task."""
    for event in events:
        with db.transaction() as session:
            outcome = transition(session, task_id, event, source="test", source_event_id=uuid.uuid4().hex,
                                 task_updates=updates if event is E.REDRIVE else None)
        assert outcome.applied, (task_id, event, outcome)


def _book(db: Database, task, kind: str, amount: str, run_no: int = 1, **kw) -> None:  # noqa: ANN001, ANN003
    """A ledger row; one with a job id is a stray's, under the key strays are booked with (schema/strays.py)."""
    job = kw.get("provider_job_id")
    key = f"adjustment:{task.id}:job:{job}" if job else f"{kind}:{task.id}:{uuid.uuid4().hex}"
    with db.transaction() as session:
        session.add(CreditEntry(tenant_id=task.tenant_id, task_id=task.id, entry_type=kind, amount=Decimal(amount),
                                business_key=key, run_no=run_no, **kw))


def _check(db: Database, task) -> None:  # noqa: ANN001
    """The automatic checks of a proxy rendition (review on)."""
    with db.transaction() as session:
        asset = Asset(id=uuid.uuid4().hex, tenant_id=task.tenant_id, task_id=task.id, kind="PROXY",
                      business_key=uuid.uuid4().hex, bucket="b", key="k", size=1, sha256="0" * 64)
        session.add(asset)
        session.flush()
        session.add(ReviewCheck(task_id=task.id, attempt_no=1, asset_id=asset.id, passed=True, results={}))


def _same(db: Database, *import_ids: str) -> None:
    with db.transaction() as session:
        assert drift(session, list(import_ids)) == {}


def test_totals_follow_every_end_review_redrive_and_reuse(stack, tmp_path):
    db = Database(stack.database_url)
    products = [(f"P-{i}", "Lamp", "A lamp") for i in range(6)]
    summary = import_small(stack, tmp_path, products)
    with db.transaction() as session:
        failed, regen, cancelled, rejected, stray, untouched = queries.list_tasks(session, summary.import_id)
    _same(db, summary.import_id)

    _walk(db, failed.id, [*TO_RUNNING, E.FINAL_FAILURE])
    _book(db, failed, "RESERVE", "4")
    _book(db, failed, "SETTLE", "4")
    _walk(db, failed.id, [E.REDRIVE], run_no=2)  # run 1 ended FAILED_FINAL: its 4 credits are wasted
    _book(db, failed, "REFUND", "1", run_no=1)  # a late refund of run 1, after the redrive
    _book(db, failed, "RESERVE", "4", run_no=2)
    _walk(db, failed.id, [*TO_PAID, E.PLAYABLE_ASSET_READY])
    _book(db, failed, "SETTLE", "4", run_no=2)

    _walk(db, regen.id, [*TO_PAID, E.REVIEW_REQUIRED])
    _book(db, regen, "RESERVE", "4")
    _book(db, regen, "SETTLE", "4")
    _check(db, regen)
    _walk(db, regen.id, [E.REVIEW_REGENERATE, E.DISPATCH_CLAIMED, E.PROVIDER_ACCEPTED, E.PROVIDER_SUCCEEDED,
                         E.OUTPUT_PERSISTED, E.REVIEW_REQUIRED])
    with db.transaction() as session:
        session.add(CreditEntry(tenant_id=regen.tenant_id, task_id=regen.id, entry_type="ADJUSTMENT",
                                amount=Decimal(5), business_key=f"{regen.id}:review:2", attempt_no=2))
    _walk(db, regen.id, [E.REVIEW_APPROVED])

    _walk(db, cancelled.id, [*TO_RUNNING, E.CANCEL_REQUESTED])
    _book(db, cancelled, "RESERVE", "3")
    _book(db, cancelled, "SETTLE", "3")
    _walk(db, cancelled.id, [E.CANCEL_CONFIRMED])

    _walk(db, rejected.id, [*TO_PAID, E.REVIEW_REQUIRED])
    _book(db, rejected, "RESERVE", "2")
    _book(db, rejected, "SETTLE", "2")
    _walk(db, rejected.id, [E.REVIEW_REJECTED])

    _walk(db, stray.id, TO_RUNNING)
    _book(db, stray, "RESERVE", "4")
    _book(db, stray, "ADJUSTMENT", "2.5", provider_job_id="job-dup")
    _same(db, summary.import_id)
    _walk(db, stray.id, [E.FINAL_FAILURE])
    _book(db, stray, "RELEASE", "4")

    with db.transaction() as session:
        spend = import_spend(session, [summary.import_id])[summary.import_id]
        counts = status_counts(session, summary.import_id)
    assert counts == {"SUCCEEDED": 2, "CANCELED": 1, "REJECTED": 1, "FAILED_FINAL": 1, "CREATED": 1}, counts
    assert spend.wasted == {"duplicate": Decimal("2.5"), "cancelled": 3, "failed": 3, "rejected": 2,
                            "regenerated": 4}, spend.wasted
    assert (spend.succeeded, spend.approved, spend.reserved) == (2, 1, 21)

    again = import_small(stack, tmp_path, [*products, ("P-new", "Vase", "A vase")])  # reuses the six tasks
    _same(db, summary.import_id, again.import_id)
    with db.transaction() as session:
        assert status_counts(session, again.import_id) == {**counts, "CREATED": 2}
        assert import_spend(session, [again.import_id])[again.import_id].wasted == spend.wasted
    _walk(db, untouched.id, [E.VALIDATION_STARTED, E.VALIDATION_FAILED])  # moves both imports
    _same(db, summary.import_id, again.import_id)

    result = run_cli("ledger", "check", summary.import_id, "--json")
    assert not [v for v in result.json["violations"] if v["rule"] == "import_totals_drift"], result.json
    with db.transaction() as session:  # a write that bypassed the triggers
        session.execute(text("UPDATE import_totals SET n_created = n_created + 1 "
                             "WHERE import_id = :imp AND shard = (SELECT min(shard) FROM import_totals "
                             "WHERE import_id = :imp)"), {"imp": summary.import_id})
    result = run_cli("ledger", "check", summary.import_id, "--json")
    assert result.code == 1
    (violation,) = [v for v in result.json["violations"] if v["rule"] == "import_totals_drift"]
    assert summary.import_id in violation["detail"] and "tasks by status" in violation["detail"]
    with db.transaction() as session:
        session.execute(text("UPDATE import_totals SET n_created = n_created - 1 "
                             "WHERE import_id = :imp AND shard = (SELECT min(shard) FROM import_totals "
                             "WHERE import_id = :imp)"), {"imp": summary.import_id})


@pytest.mark.timeout(600)
def test_concurrent_writers_of_one_import_neither_deadlock_nor_drift(stack, tmp_path):
    db = Database(stack.database_url)
    summary = import_small(stack, tmp_path, [(f"C-{i}", "Mug", "A mug") for i in range(6)],
                           locales=("en-US", "de-DE"), ratios=("9:16", "16:9"))
    with db.transaction() as session:
        tasks = queries.list_tasks(session, summary.import_id)
    writers = 6
    start, errors = threading.Barrier(writers), []

    def write(w: int) -> None:
        mine = tasks[w::writers]
        try:
            start.wait()
            for step, event in enumerate(TO_PAID):
                for task in mine:  # its own tasks move; every writer books on every task of the import
                    _walk(db, task.id, [event])
                    _book(db, tasks[(w + step) % len(tasks)], "ADJUSTMENT", f"0.{w}{step}")
                    _book(db, task, "RESERVE" if step == 0 else "REFUND", "1", attempt_no=step or None)
            for task in mine:
                _walk(db, task.id, [E.PLAYABLE_ASSET_READY if w % 2 else E.FINAL_FAILURE])
                _book(db, task, "SETTLE" if w % 2 else "RELEASE", "1")
        except Exception as exc:  # noqa: BLE001 - reported below, with the writer
            errors.append((w, exc))

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    _same(db, summary.import_id)
    with db.transaction() as session:
        counts = status_counts(session, summary.import_id)
        shards = session.scalar(text("SELECT count(*) FROM import_totals WHERE import_id = :imp"),
                                {"imp": summary.import_id})
    assert sum(counts.values()) == len(tasks) and set(counts) == {"SUCCEEDED", "FAILED_FINAL"}
    assert shards > 1  # the import's writes spread over several rows


def test_the_migration_backfills_and_downgrades(stack, empty_database, tmp_path):  # noqa: F811 - the fixture
    settings = stack.model_copy(update={"database_url": empty_database})
    db = Database(empty_database)
    upgrade(empty_database, "0016")
    products = [(f"M-{i}", "Cup", "A cup") for i in range(3)]
    first = import_small(settings, tmp_path, products)
    with db.transaction() as session:
        a, b, c = queries.list_tasks(session, first.import_id)
    _walk(db, a.id, [*TO_RUNNING, E.FINAL_FAILURE])
    _book(db, a, "RESERVE", "4")
    _book(db, a, "SETTLE", "4")
    _walk(db, a.id, [E.REDRIVE], run_no=2)
    _walk(db, b.id, [*TO_PAID, E.REVIEW_REQUIRED])
    _check(db, b)
    _book(db, b, "RESERVE", "4")
    _book(db, b, "SETTLE", "4")
    _walk(db, b.id, [E.REVIEW_APPROVED])
    second = import_small(settings, tmp_path, [*products, ("M-new", "Jug", "A jug")])
    upgrade(empty_database, "head")
    _same(db, first.import_id, second.import_id)
    with db.transaction() as session:
        assert import_spend(session, [second.import_id])[second.import_id].approved == 1
    command.downgrade(alembic_config(empty_database), "0016")
    with db.transaction() as session:
        assert session.scalar(text("SELECT to_regclass('import_totals')")) is None
    _walk(db, c.id, [E.VALIDATION_STARTED])  # no trigger left behind
    upgrade(empty_database, "head")
    _same(db, first.import_id, second.import_id)


def test_bulk_statements_keep_the_totals(stack, tmp_path):
    """Statements past BULK rows (an import's COPY, a seed in SQL, a cleanup) take the planned-afresh path."""
    from bench.spend_bench import _EVENTS, _FINISH, _LEDGER

    db = Database(stack.database_url)
    summary = import_small(stack, tmp_path, [(f"B-{i}", "Pen", "A pen") for i in range(300)],
                           locales=("en-US", "de-DE"), ratios=("9:16", "16:9"))
    with db.transaction() as session:
        for sql in (_FINISH, _LEDGER, _EVENTS):
            session.execute(text(sql), {"imp": summary.import_id})
    _same(db, summary.import_id)
    with db.transaction() as session:
        spend = import_spend(session, [summary.import_id])[summary.import_id]
        assert sum(status_counts(session, summary.import_id).values()) == 1200
        session.execute(text("DELETE FROM state_events WHERE task_id IN (SELECT id FROM tasks WHERE import_id = :imp)"),
                        {"imp": summary.import_id})
    assert spend.succeeded == 960 and spend.wasted["duplicate"] > 0
    _same(db, summary.import_id)
