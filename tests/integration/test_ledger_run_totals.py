"""The ledger's running totals (`ledger_run_totals`, kept by the insert trigger of migration 0015)
stay equal to the sums of the ledger rows across every entry type, several runs, review videos,
concurrent writers and a cleanup that deletes rows; `reelqueue ledger check` reports a drift."""

from __future__ import annotations

import threading
from collections import defaultdict
from decimal import Decimal

import pytest
from cli_helpers import run_cli
from sqlalchemy import delete, func, select, update
from stack_helpers import import_small

from schema import queries
from schema.db import Database
from schema.ledger_check import ENTRY_TOTALS
from schema.models import CreditEntry, LedgerRunTotal

pytestmark = pytest.mark.integration

FIGURES = ENTRY_TOTALS


def _from_ledger(db: Database, task_ids: list[str]) -> dict[tuple[str, int], dict[str, Decimal]]:
    """Per task run, each figure summed straight from credit_ledger (the query the totals replace)."""
    out: dict[tuple[str, int], dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    last: dict[tuple[str, int], tuple[int, Decimal]] = {}
    with db.transaction() as session:
        for e in session.scalars(select(CreditEntry).where(CreditEntry.task_id.in_(task_ids))
                                 .order_by(CreditEntry.id)):
            run = out[(e.task_id, e.run_no)]
            run[FIGURES[e.entry_type]] += e.amount
            if e.entry_type == "ADJUSTMENT" and e.business_key == f"adjustment:{e.task_id}:job:{e.provider_job_id}":
                run["duplicate"] += e.amount  # a stray job's (schema/strays.py), not a correction of an own job
            review = e.entry_type == "ADJUSTMENT" and ":review:" in e.business_key
            if review and e.attempt_no >= last.get((e.task_id, e.run_no), (-1, None))[0]:
                last[(e.task_id, e.run_no)] = (e.attempt_no, e.amount)
    for key, (_, amount) in last.items():
        out[key]["last_video"] = amount
    return {k: {f: v for f, v in figures.items() if v} for k, figures in out.items()}


def _totals(db: Database, task_ids: list[str]) -> dict[tuple[str, int], dict[str, Decimal]]:
    with db.transaction() as session:
        rows = session.scalars(select(LedgerRunTotal).where(LedgerRunTotal.task_id.in_(task_ids))).all()
        return {(r.task_id, r.run_no): {f: getattr(r, f) for f in (*FIGURES.values(), "duplicate", "last_video")
                                        if getattr(r, f)} for r in rows}


def _entry(session, task, kind: str, amount: str, key: str, run_no: int = 1, attempt: int | None = None,
           job: str | None = None) -> None:  # noqa: ANN001
    session.add(CreditEntry(tenant_id=task.tenant_id, task_id=task.id, entry_type=kind, amount=Decimal(amount),
                            business_key=key, run_no=run_no, attempt_no=attempt, provider_job_id=job))


def test_totals_follow_every_entry_type_runs_reviews_and_deletes(stack, tmp_path):
    db = Database(stack.database_url)
    summary = import_small(stack, tmp_path, [("T-1", "Lamp", "A lamp"), ("T-2", "Mug", "A mug")])
    with db.transaction() as session:
        tasks = queries.list_tasks(session, summary.import_id)
    a, b = tasks
    with db.transaction() as session:  # run 1 of a: reserve, settle, a stray's cost, its own job's, a refund
        _entry(session, a, "RESERVE", "10", f"r:{a.id}:1")
        _entry(session, a, "SETTLE", "8", f"s:{a.id}:1")
        _entry(session, a, "RELEASE", "2", f"l:{a.id}:1")
        _entry(session, a, "ADJUSTMENT", "3.5", f"adjustment:{a.id}:job:job-9", job="job-9")
        _entry(session, a, "ADJUSTMENT", "0.75", f"adjustment:{a.id}:backstop:job-1", attempt=1, job="job-1")
        _entry(session, a, "REFUND", "1.25", f"refund:{a.id}:1")
    with db.transaction() as session:  # run 2 of a: reserve, released; b: regenerated twice at review
        _entry(session, a, "RESERVE", "10", f"r:{a.id}:2", run_no=2)
        _entry(session, a, "RELEASE", "10", f"l:{a.id}:2", run_no=2)
        _entry(session, b, "RESERVE", "5", f"r:{b.id}:1")
        _entry(session, b, "SETTLE", "5", f"s:{b.id}:1")
        _entry(session, b, "ADJUSTMENT", "4", f"{b.id}:review:3", attempt=3)
        _entry(session, b, "ADJUSTMENT", "6", f"{b.id}:review:2", attempt=2)  # an older attempt booked late
        _entry(session, b, "ADJUSTMENT", "-0.5", f"correction:{b.id}")
    ids = [a.id, b.id]
    assert _totals(db, ids) == _from_ledger(db, ids)
    assert _totals(db, ids)[(b.id, 1)]["last_video"] == Decimal(4)
    assert _totals(db, ids)[(a.id, 1)]["duplicate"] == Decimal("3.5")
    with db.transaction() as session:  # a cleanup (or a repair) that deletes rows: the run is recounted
        session.execute(delete(CreditEntry).where(CreditEntry.business_key.in_([f"s:{a.id}:1", f"{b.id}:review:3"])))
    assert _totals(db, ids) == _from_ledger(db, ids)
    assert _totals(db, ids)[(b.id, 1)]["last_video"] == Decimal(6)


def test_concurrent_writers_keep_the_totals(stack, tmp_path):
    db = Database(stack.database_url)
    summary = import_small(stack, tmp_path, [(f"C-{i}", "Lamp", "A lamp") for i in range(4)])
    with db.transaction() as session:
        tasks = queries.list_tasks(session, summary.import_id)
    writers, per_writer = 6, 40
    start = threading.Barrier(writers)

    def write(w: int) -> None:
        start.wait()
        for i in range(per_writer):
            task = tasks[(w + i) % len(tasks)]
            with db.transaction() as session:  # each writer on every task's run 1 and run 2
                _entry(session, task, "ADJUSTMENT", f"{w}.{i:02d}", f"adj:{task.id}:{w}:{i}", run_no=1 + i % 2)
                _entry(session, task, "REFUND", "0.01", f"ref:{task.id}:{w}:{i}", run_no=1 + i % 2)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [t.id for t in tasks]
    with db.transaction() as session:
        assert session.scalar(select(func.count()).select_from(CreditEntry)
                              .where(CreditEntry.task_id.in_(ids))) == writers * per_writer * 2
    assert _totals(db, ids) == _from_ledger(db, ids)


def test_ledger_check_reports_a_drift(stack, tmp_path):
    db = Database(stack.database_url)
    summary = import_small(stack, tmp_path, [("D-1", "Lamp", "A lamp")])
    with db.transaction() as session:
        (task,) = queries.list_tasks(session, summary.import_id)
    with db.transaction() as session:
        _entry(session, task, "ADJUSTMENT", "2", f"adj:{task.id}")
    result = run_cli("ledger", "check", summary.import_id, "--json")
    assert not [v for v in result.json["violations"] if v["rule"] == "totals_drift"], result.json
    with db.transaction() as session:  # a write that bypassed the trigger
        session.execute(update(LedgerRunTotal).where(LedgerRunTotal.task_id == task.id)
                        .values(adjusted=LedgerRunTotal.adjusted + 1))
    result = run_cli("ledger", "check", summary.import_id, "--json")
    assert result.code == 1
    assert [(v["task_id"], v["rule"]) for v in result.json["violations"]] == [(task.id, "totals_drift")]
    with db.transaction() as session:
        session.execute(delete(CreditEntry).where(CreditEntry.task_id == task.id))  # recounts the run: clean again
    assert run_cli("ledger", "check", summary.import_id, "--json").code == 0
