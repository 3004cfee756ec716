"""`reelqueue ledger check`: clean on an import that ran to the end; each seeded breach of a rule
is reported with its task and rule (exit 1); Temporal is asked only about open reservations."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from cli_helpers import run_cli, run_cli_async
from sqlalchemy import delete, select, update
from stack_helpers import import_small, run_all, serving, start_one_at_provider

from contracts import workflow_api as api
from contracts.messages import CancelRequest
from schema import queries
from schema.db import Database
from schema.models import Attempt, CreditEntry, StateEvent, StrayJob, Task

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
async def finished(stack, client, tmp_path_factory) -> tuple[str, list[str]]:
    """An import of three tasks, every one SUCCEEDED (shared: each test undoes what it seeds)."""
    queue = f"test-{uuid.uuid4().hex[:12]}"
    products = [("L-1", "Lamp", "A lamp"), ("L-2", "Mug", "A mug"), ("L-3", "Vase", "A vase")]
    summary = import_small(stack, tmp_path_factory.mktemp("ledger-finished"), products)
    async with serving(client, stack, queue):
        tasks = await run_all(client, stack, summary.import_id, queue)
    assert [t.status for t in tasks] == ["SUCCEEDED"] * 3
    return summary.import_id, [t.id for t in tasks]


def _check(import_id: str | None) -> tuple[int, dict]:
    result = run_cli("ledger", "check", *([import_id] if import_id else []), "--json")
    assert result.code in (0, 1), (result.code, result.stdout, result.stderr, result.exception)
    return result.code, result.json


def _rules(report: dict, task_id: str) -> set[str]:
    return {v["rule"] for v in report["violations"] if v["task_id"] == task_id}


def test_an_import_that_ran_to_the_end_passes(finished):
    import_id, task_ids = finished
    code, report = _check(import_id)
    assert code == 0, report
    assert {k: report[k] for k in ("import_id", "tasks_checked", "workflows_described", "violations", "ok")} == \
        {"import_id": import_id, "tasks_checked": 3, "workflows_described": 0, "violations": [], "ok": True}
    human = run_cli("ledger", "check", import_id)
    assert human.code == 0 and "ledger ok" in human.stdout and "3 tasks checked" in human.stdout


def test_a_second_reserve_is_reported(stack, finished):
    import_id, task_ids = finished
    task_id = task_ids[0]
    db = Database(stack.database_url)
    with db.transaction() as session:
        tenant = session.get(Task, task_id).tenant_id
        session.add(CreditEntry(tenant_id=tenant, task_id=task_id, entry_type="RESERVE", amount=Decimal(1),
                                business_key=f"reserve-extra:{task_id}"))
    try:
        code, report = _check(import_id)
        assert code == 1 and report["ok"] is False
        assert _rules(report, task_id) == {"repeated_entry", "unbalanced"}
        assert {v["task_id"] for v in report["violations"]} == {task_id}
        human = run_cli("ledger", "check", import_id)
        assert human.code == 1
        assert task_id in human.stdout and "repeated_entry" in human.stdout and "unbalanced" in human.stdout
    finally:
        with db.transaction() as session:
            session.execute(delete(CreditEntry).where(CreditEntry.business_key == f"reserve-extra:{task_id}"))
    assert _check(import_id)[0] == 0


def test_an_attempt_left_acked_on_a_finished_task_is_reported(stack, finished):
    import_id, task_ids = finished
    task_id = task_ids[1]
    db = Database(stack.database_url)
    with db.transaction() as session:
        attempt = session.scalars(select(Attempt).where(Attempt.task_id == task_id)
                                  .order_by(Attempt.attempt_no.desc())).first()
        last, was = attempt.attempt_no, attempt.submit_state
        attempt.submit_state = "ACKED"
    try:
        code, report = _check(import_id)
        assert code == 1
        assert _rules(report, task_id) == {"open_attempt"}
        (violation,) = report["violations"]
        assert "ACKED" in violation["detail"] and "does not account for" in violation["detail"]
    finally:
        with db.transaction() as session:
            session.execute(update(Attempt).where(Attempt.task_id == task_id, Attempt.attempt_no == last)
                            .values(submit_state=was))


def test_a_stray_job_needs_accounted_and_its_adjustment(stack, finished):
    import_id, task_ids = finished
    task_id = task_ids[2]
    job_id = f"stray-{uuid.uuid4().hex[:8]}"
    db = Database(stack.database_url)
    with db.transaction() as session:
        tenant = session.get(Task, task_id).tenant_id
        session.add(StrayJob(task_id=task_id, attempt_no=1, provider="emulator", provider_job_id=job_id,
                             found_by="reconcile", provider_status="succeeded", cost=Decimal(2), accounted=False))
    try:
        code, report = _check(import_id)
        assert code == 1 and _rules(report, task_id) == {"stray_unaccounted"}
        assert "not marked accounted and no ADJUSTMENT row" in report["violations"][0]["detail"]

        with db.transaction() as session:
            session.execute(update(StrayJob).where(StrayJob.provider_job_id == job_id).values(accounted=True))
        code, report = _check(import_id)
        assert code == 1 and report["violations"][0]["detail"].endswith("no ADJUSTMENT row")

        with db.transaction() as session:
            session.add(CreditEntry(tenant_id=tenant, task_id=task_id, entry_type="ADJUSTMENT", amount=Decimal(2),
                                    business_key=f"adjustment:{task_id}:job:{job_id}", attempt_no=1,
                                    provider_job_id=job_id))
        assert _check(import_id)[0] == 0  # an ADJUSTMENT is outside RESERVE = SETTLE + RELEASE
    finally:
        with db.transaction() as session:
            session.execute(delete(CreditEntry).where(CreditEntry.provider_job_id == job_id))
            session.execute(delete(StrayJob).where(StrayJob.provider_job_id == job_id))


def test_an_open_reservation_needs_a_running_workflow_or_a_person(stack, tmp_path):
    summary = import_small(stack, tmp_path, [("L-4", "Desk", "A desk")])
    db = Database(stack.database_url)
    with db.transaction() as session:
        (task,) = queries.list_tasks(session, summary.import_id)
        session.add(CreditEntry(tenant_id=task.tenant_id, task_id=task.id, entry_type="RESERVE",
                                amount=Decimal(3), business_key=f"reserve:{task.id}"))
    code, report = _check(summary.import_id)  # CREATED, reserved, and no workflow ever started
    assert code == 1 and report["workflows_described"] == 1
    (violation,) = report["violations"]
    assert violation["rule"] == "reservation_without_workflow" and violation["task_id"] == task.id
    assert "no such workflow" in violation["detail"] and task.workflow_id in violation["detail"]

    with db.transaction() as session:  # a task waiting for a decision holds its reservation on purpose
        session.execute(update(Task).where(Task.id == task.id).values(status="NEEDS_ATTENTION", version=1))
        session.add(StateEvent(task_id=task.id, source="test", source_event_id=f"{task.id}:attention",
                               event="needs_attention", from_status="CREATED", to_status="NEEDS_ATTENTION",
                               task_version=1, payload={"stuck": "reconcile", "evidence": "the provider is mute"}))
    code, report = _check(summary.import_id)
    assert code == 0 and report["workflows_described"] == 0
    with db.transaction() as session:  # without its evidence a person could not decide: reported
        session.execute(delete(StateEvent).where(StateEvent.task_id == task.id))
    code, report = _check(summary.import_id)
    assert code == 1 and report["violations"] == []
    assert {r["rule"]: r["violations"] for r in report["rules"] if r["violations"]} == {"task_finished": 1}


def test_a_reservation_held_while_waiting_past_the_task_deadline_is_reported(stack, finished, tmp_path):
    """The workflow records the task deadline on QUEUED; a QUEUED or RETRY_WAIT task still holding
    its reservation past it is reported, whether or not its workflow runs."""
    db = Database(stack.database_url)
    with db.transaction() as session:  # a real run recorded it: 24 h (the default task_hours) from QUEUED
        recorded = session.get(Task, finished[1][0]).deadline_at
    assert recorded is not None
    assert timedelta(hours=23) < recorded - datetime.now(UTC) <= timedelta(hours=24)

    summary = import_small(stack, tmp_path, [("L-6", "Shelf", "A shelf")])
    with db.transaction() as session:
        (task,) = queries.list_tasks(session, summary.import_id)
        session.add(CreditEntry(tenant_id=task.tenant_id, task_id=task.id, entry_type="RESERVE",
                                amount=Decimal(3), business_key=f"reserve:{task.id}"))
        session.execute(update(Task).where(Task.id == task.id).values(
            status="QUEUED", deadline_at=datetime.now(UTC) - timedelta(hours=2)))
    code, report = _check(summary.import_id)
    assert code == 1 and _rules(report, task.id) == {"held_past_deadline", "reservation_without_workflow"}
    (late,) = [v for v in report["violations"] if v["rule"] == "held_past_deadline"]
    assert "QUEUED 2.0 h past the task deadline" in late["detail"]

    for status, deadline in (("RETRY_WAIT", timedelta(minutes=-5)), ("RUNNING", timedelta(hours=-2)),
                             ("RETRY_WAIT", timedelta(hours=-2))):
        with db.transaction() as session:
            session.execute(update(Task).where(Task.id == task.id).values(
                status=status, deadline_at=datetime.now(UTC) + deadline))
        # within the slack, or a job may run (its own deadline bounds it): only the workflow is missing
        expected = {"reservation_without_workflow"} | ({"held_past_deadline"} if deadline < -timedelta(hours=1)
                                                       and status == "RETRY_WAIT" else set())
        assert _rules(_check(summary.import_id)[1], task.id) == expected, status

    with db.transaction() as session:  # settled: nothing is held any more
        session.add(CreditEntry(tenant_id=task.tenant_id, task_id=task.id, entry_type="RELEASE",
                                amount=Decimal(3), business_key=f"release:{task.id}"))
    assert _rules(_check(summary.import_id)[1], task.id) == set()


async def test_an_open_reservation_of_a_running_workflow_is_fine(stack, client, task_queue, tmp_path):
    task = await start_one_at_provider(stack, client, task_queue, tmp_path, ("L-5", "Clock", "A clock"))
    running = (await run_cli_async("ledger", "check", task.import_id, "--json")).json
    assert running["ok"] is True and running["workflows_described"] == 1

    await client.get_workflow_handle(task.workflow_id).signal(api.SIGNAL_CANCEL, CancelRequest(reason="test over"))
    await asyncio.wait_for(client.get_workflow_handle(task.workflow_id).result(), timeout=60)
    done = (await run_cli_async("ledger", "check", task.import_id, "--json")).json
    assert done["ok"] is True and done["workflows_described"] == 0


def test_every_import_and_an_unknown_one(finished):
    code, report = _check(None)
    assert report["import_id"] is None and report["tasks_checked"] >= 3
    unknown = run_cli("ledger", "check", "imp_does_not_exist", "--json")
    assert unknown.code == 2 and "no import" in unknown.json["error"]
