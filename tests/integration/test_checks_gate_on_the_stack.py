"""Checks gate success on the real stack: a template without review whose emulator output is a black
clip (the emulator's `black_video` fault) is never SUCCEEDED; it is regenerated once (its estimate
held first), and a second black clip sends it to REVIEW; the ledger check stays clean."""

from __future__ import annotations

import httpx
import pytest
from cli_helpers import run_cli_async
from sqlalchemy import select
from stack_helpers import import_small, wait_for_status

from control.starting import start_workflows
from schema import queries
from schema.db import Database
from schema.models import Attempt, CreditEntry, ReviewCheck, StateEvent

pytestmark = pytest.mark.integration


async def test_a_black_clip_without_review_is_regenerated_once_then_reviewed(stack, client, task_queue, tmp_path):
    httpx.post(f"{stack.emulator_url}/_sim/faults", json={"black_video": 2}, timeout=10).raise_for_status()
    try:
        summary = import_small(stack, tmp_path, [("B-1", "Night Lamp", "A lamp")])  # review off
        db = Database(stack.database_url)
        with db.transaction() as session:
            (task,) = queries.list_tasks(session, summary.import_id)
        await start_workflows(client, [task], summary.import_id, task_queue)
        status = await wait_for_status(stack, task.id, {"REVIEW", "SUCCEEDED", "FAILED_FINAL"}, timeout_s=180)
    finally:
        httpx.delete(f"{stack.emulator_url}/_sim/faults", timeout=10)
    assert status == "REVIEW"
    with db.transaction() as session:
        events = [(e.event, e.to_status, e.payload) for e in session.scalars(
            select(StateEvent).where(StateEvent.task_id == task.id, StateEvent.applied).order_by(StateEvent.id))]
        attempts = session.scalars(select(Attempt).where(Attempt.task_id == task.id)).all()
        checks = session.scalars(select(ReviewCheck).where(ReviewCheck.task_id == task.id)
                                 .order_by(ReviewCheck.attempt_no)).all()
        ledger = session.execute(select(CreditEntry.entry_type, CreditEntry.amount, CreditEntry.attempt_no)
                                 .where(CreditEntry.task_id == task.id).order_by(CreditEntry.id)).all()
    assert [(e, to) for e, to, _ in events if e in ("checks_failed", "review_required")] == [
        ("checks_failed", "QUEUED"), ("review_required", "REVIEW")]
    assert not any(to == "SUCCEEDED" for _, to, _ in events)
    assert "black" in next(p for e, _, p in events if e == "checks_failed")["failed_checks"]
    assert len(attempts) == 2 and [c.attempt_no for c in checks] == [1, 2] and not any(c.passed for c in checks)
    kinds = [kind for kind, _, _ in ledger]
    assert kinds[:2] == ["RESERVE", "RESERVE"] and ledger[1][2] == 2  # the regeneration's hold, before its job
    reserved = sum(a for k, a, _ in ledger if k == "RESERVE")
    assert reserved == sum(a for k, a, _ in ledger if k in ("SETTLE", "RELEASE"))  # settled on entering REVIEW
    checked = await run_cli_async("ledger", "check", summary.import_id, "--json")
    assert checked.code == 0, checked.json
