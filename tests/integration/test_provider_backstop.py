"""The provider backstop on the real stack: the emulator lists the jobs it ran, `ledger reconcile`
books what the ledger does not account for, `ledger check` lists it.

Each job here is made or changed behind the API's back by the emulator's test hooks: a job no
attempt knows, the first job of an attempt whose duplicate risk a person accepted, a success of a
task that ended CANCELED (`POST /_sim/jobs`), the job of a task that SUCCEEDED re-rated by the
provider afterwards (`POST /_sim/jobs/{id}`)."""

from __future__ import annotations

import uuid
from decimal import Decimal

import httpx
import pytest
from alembic import command
from backstop_helpers import adjustments_of, ended_task, reconcile_until_settled, sim_job
from cli_helpers import run_cli_async
from sqlalchemy import func, select
from stack_helpers import import_small, run_all

from contracts.task import TaskStatus
from schema.db import Database
from schema.ledger_check import fmt_amount
from schema.migrate import alembic_config, upgrade
from schema.models import Attempt, CreditEntry, StateEvent, StrayJob, Task
from schema.spend import import_spend

pytestmark = pytest.mark.integration


async def test_a_job_no_attempt_knows_is_booked_as_an_orphan_and_listed_by_ledger_check(stack):
    job = sim_job(stack, f"foreign-{uuid.uuid4().hex}")
    assert job["status"] == "succeeded" and job["usage"]["cost"] > 0

    report = await reconcile_until_settled()

    found = next(f for f in report["findings"] if f["job_id"] == job["id"])
    assert found["verdict"] == "orphan" and found["task_id"] is None
    assert Decimal(str(found["cost"])) == Decimal(str(job["usage"]["cost"]))
    [entry] = adjustments_of(stack, job["id"])
    assert (entry.entry_type, entry.task_id, entry.tenant_id) == ("ADJUSTMENT", None, None)
    assert entry.amount == Decimal(str(job["usage"]["cost"])) and "orphan" in entry.note
    with Database(stack.database_url).transaction() as session:
        stray = session.scalars(select(StrayJob).where(StrayJob.provider_job_id == job["id"])).one()
        assert stray.evidence["job_id"] == job["id"] and stray.request_key == job["request_key"]

    again = await reconcile_until_settled()  # a second pass books nothing more
    assert len(adjustments_of(stack, job["id"])) == 1
    assert next(f for f in again["findings"] if f["job_id"] == job["id"])["booked"] is None

    check = await run_cli_async("ledger", "check", "--skip-storage", "--json")
    orphan = next(o for o in check.json["orphans"] if o["job_id"] == job["id"])
    assert orphan["accounted"] is True and orphan["task_id"] is None
    assert not [v for v in check.json["violations"] if v["rule"] == "orphan_unaccounted"]
    human = await run_cli_async("ledger", "check", "--skip-storage")
    assert job["id"] in human.stdout


async def test_the_first_job_of_an_accepted_duplicate_risk_is_settled_naming_the_attempt(stack, tmp_path):
    """`resolve --accept-duplicate-risk` abandons the unknown attempt (ABANDONED, no job id); when the
    job that submit did create shows up, its cost is an ADJUSTMENT naming that attempt."""
    key = f"risk-{uuid.uuid4().hex}-a1"
    task = ended_task(stack, tmp_path, TaskStatus.FAILED_FINAL, None, key, "ABANDONED")
    job = sim_job(stack, key)

    report = await reconcile_until_settled()

    found = next(f for f in report["findings"] if f["job_id"] == job["id"])
    assert (found["verdict"], found["task_id"], found["attempt_no"]) == ("stray", task.id, 1)
    [entry] = adjustments_of(stack, job["id"])
    assert (entry.entry_type, entry.task_id, entry.attempt_no) == ("ADJUSTMENT", task.id, 1)
    assert entry.amount == Decimal(str(job["usage"]["cost"]))
    assert "attempt 1, whose duplicate risk was accepted" in entry.note
    assert _wasted(stack, task.import_id)["duplicate"] == entry.amount  # a second job: a real duplicate


async def test_a_success_after_canceled_is_an_orphan_output_with_its_cost_booked(stack, tmp_path):
    """The provider ran the job to the end although the task ended CANCELED (its cancel lost the
    race): the output is recorded, its cost booked, the task flagged, its status unchanged."""
    key = f"late-{uuid.uuid4().hex}-a1"
    job = sim_job(stack, key)
    task = ended_task(stack, tmp_path, TaskStatus.CANCELED, job["id"], key, "CANCELED")

    report = await reconcile_until_settled()

    found = next(f for f in report["findings"] if f["job_id"] == job["id"])
    assert (found["verdict"], found["task_id"]) == ("output_after_cancel", task.id)
    [entry] = [e for e in adjustments_of(stack, job["id"]) if e.entry_type == "ADJUSTMENT"]
    assert entry.amount == Decimal(str(job["usage"]["cost"])) and "CANCELED" in entry.note
    with Database(stack.database_url).transaction() as session:
        assert session.get(Task, task.id).status == TaskStatus.CANCELED.value
        event = session.scalars(select(StateEvent).where(StateEvent.task_id == task.id,
                                                         StateEvent.event == "orphan_output")).one()
        assert event.applied is False and event.payload["outputs"]
    check = await run_cli_async("ledger", "check", "--skip-storage", "--json")
    assert any(o["job_id"] == job["id"] and o["task_id"] == task.id for o in check.json["orphans"])
    assert not [v for v in check.json["violations"] if v["task_id"] == task.id]


async def test_reconcile_refuses_a_bad_window_and_an_unknown_provider(stack):
    bad = await run_cli_async("ledger", "reconcile", "--since", "0", "--json")
    assert bad.code == 2 and "--since" in bad.stdout + bad.stderr
    unknown = await run_cli_async("ledger", "reconcile", "--provider", "nope", "--json")
    assert unknown.code == 2 and "nope" in unknown.stdout + unknown.stderr


async def test_providers_that_cannot_list_are_named(stack):
    done = await run_cli_async("ledger", "reconcile", "--since", "0.01", "--json")
    assert done.code == 0, (done.stdout, done.stderr, repr(done.exception))
    skipped = {s["provider"]: s["reason"] for s in done.json["skipped"]}
    assert "emulator" not in skipped
    assert "no listing" in skipped["runway"]


@pytest.mark.parametrize(("factor", "kind", "verdict"), [(Decimal("1.5"), "ADJUSTMENT", "adjusted"),
                                                         (Decimal("0.4"), "REFUND", "refunded")])
async def test_a_job_the_provider_re_rated_after_success_is_adjusted_or_refunded_once(
        stack, client, task_queue, tmp_path, factor, kind, verdict):
    """A task that SUCCEEDED settled what the provider then charged; the provider later charges more
    (or less) for that job: one pass books the difference as an ADJUSTMENT (or a REFUND) naming it,
    a second pass books nothing more, and `ledger check` stays ok."""
    summary = import_small(stack, tmp_path, [("R-1", "Mug", "A mug")], duration_s=2)
    (task,) = await run_all(client, stack, summary.import_id, task_queue)
    assert task.status == "SUCCEEDED"
    with Database(stack.database_url).transaction() as session:
        (attempt,) = session.scalars(select(Attempt).where(Attempt.task_id == task.id)).all()
        job_id = attempt.provider_job_id
    [before] = [j for j in httpx.get(f"{stack.emulator_url}/_sim/jobs", timeout=10).json()["jobs"]
                if j["id"] == job_id]
    charged = (Decimal(str(before["usage"]["cost"])) * factor).quantize(Decimal("0.01"))
    httpx.post(f"{stack.emulator_url}/_sim/jobs/{job_id}", json={"cost": float(charged)},
               timeout=10).raise_for_status()

    report = await reconcile_until_settled()

    found = next(f for f in report["findings"] if f["job_id"] == job_id)
    booked = Decimal(str(before["usage"]["cost"]))  # what the workflow settled
    with Database(stack.database_url).transaction() as session:
        assert session.scalar(select(func.sum(CreditEntry.amount)).where(
            CreditEntry.task_id == task.id, CreditEntry.entry_type == "SETTLE")) == booked
    assert (found["verdict"], found["task_id"], found["attempt_no"]) == (verdict, task.id, 1)
    assert Decimal(str(found["booked"])) == abs(charged - booked)
    [entry] = [e for e in adjustments_of(stack, job_id) if e.entry_type in ("ADJUSTMENT", "REFUND")]
    assert (entry.entry_type, entry.task_id, entry.attempt_no) == (kind, task.id, 1)
    assert entry.amount == abs(charged - booked)
    assert f"the provider charged {fmt_amount(charged)} for job {job_id}" in entry.note
    assert f"the ledger held {fmt_amount(booked)} for attempt 1" in entry.note

    again = await reconcile_until_settled()
    assert [e.id for e in adjustments_of(stack, job_id) if e.entry_type in ("ADJUSTMENT", "REFUND")] == [entry.id]
    assert job_id not in {f["job_id"] for f in again["findings"]}  # ledger and provider agree now
    check = await run_cli_async("ledger", "check", summary.import_id, "--skip-storage", "--json")
    assert check.code == 0 and check.json["ok"], check.stdout


async def test_a_task_charged_for_two_attempts_agrees_with_the_provider_job_by_job(stack, client, task_queue, tmp_path):
    """A task whose first video failed its checks (a black clip) and whose second passed: the provider
    charged both jobs and the task's one SETTLE holds their sum, naming the last attempt. The listing
    finds each job charged what the ledger holds for it: nothing is booked (judged against the
    SETTLE's attempt alone, the first job read as unbooked and the second as overcharged)."""
    httpx.post(f"{stack.emulator_url}/_sim/faults", json={"black_video": 1}, timeout=10).raise_for_status()
    try:
        summary = import_small(stack, tmp_path, [("T-2", "Kettle", "A kettle")], duration_s=2)
        (task,) = await run_all(client, stack, summary.import_id, task_queue)
    finally:
        httpx.delete(f"{stack.emulator_url}/_sim/faults", timeout=10)
    assert task.status == "SUCCEEDED"
    with Database(stack.database_url).transaction() as session:
        jobs = session.scalars(select(Attempt.provider_job_id).where(Attempt.task_id == task.id)
                               .order_by(Attempt.attempt_no)).all()
        settled = session.scalar(select(func.sum(CreditEntry.amount)).where(
            CreditEntry.task_id == task.id, CreditEntry.entry_type == "SETTLE"))
    listed = {j["id"]: j for j in httpx.get(f"{stack.emulator_url}/_sim/jobs", timeout=10).json()["jobs"]}
    costs = [Decimal(str(listed[j]["usage"]["cost"])) for j in jobs]
    assert len(jobs) == 2 and all(c > 0 for c in costs) and settled == sum(costs)

    report = await reconcile_until_settled()

    assert [f for f in report["findings"] if f["job_id"] in jobs and f["booked"]] == []
    assert [e for j in jobs for e in adjustments_of(stack, j)] == []


def _wasted(stack, import_id: str) -> dict[str, Decimal]:
    with Database(stack.database_url).transaction() as session:
        return import_spend(session, [import_id])[import_id].wasted


async def test_a_backstop_correction_of_a_tasks_own_job_is_not_duplicate_waste(stack, tmp_path):
    """Issue 44, also seen: the backstop's ADJUSTMENT for a task's own job carries the job id, and
    spend counted every ADJUSTMENT with a job id as a duplicate job. The provider charged a SUCCEEDED
    task's only job more than the workflow settled: the difference is what the task cost, not waste;
    for a task that ended CANCELED the same correction is waste of the cancelled run, not a duplicate.
    The running totals and the recount (`ledger check`'s import_totals_drift) agree."""
    outcomes = {}
    for status, attempt_state in ((TaskStatus.SUCCEEDED, "SUCCEEDED"), (TaskStatus.CANCELED, "CANCELED")):
        key = f"own-{uuid.uuid4().hex}-a1"
        job = sim_job(stack, key)
        (tmp_path / status.value).mkdir()
        task = ended_task(stack, tmp_path / status.value, status, job["id"], key, attempt_state)
        settled = (Decimal(str(job["usage"]["cost"])) / 2).quantize(Decimal("0.000001"))
        with Database(stack.database_url).transaction() as session:
            for kind in ("RESERVE", "SETTLE"):
                session.add(CreditEntry(tenant_id=task.tenant_id, task_id=task.id, entry_type=kind, amount=settled,
                                        business_key=f"{kind.lower()}:{task.id}", attempt_no=1, run_no=1))
        outcomes[status] = (task, job, settled)
    await reconcile_until_settled()

    for status, cause in ((TaskStatus.SUCCEEDED, None), (TaskStatus.CANCELED, "cancelled")):
        task, job, settled = outcomes[status]
        [entry] = [e for e in adjustments_of(stack, job["id"]) if e.entry_type == "ADJUSTMENT"]
        assert entry.amount == Decimal(str(job["usage"]["cost"])) - settled, entry.note
        wasted = _wasted(stack, task.import_id)
        assert wasted["duplicate"] == 0, (status, wasted)
        assert wasted == {c: (settled + entry.amount if c == cause else Decimal(0)) for c in wasted}, (status, wasted)
        await _no_drift(task.import_id)

    # migration 0020 recounts rows booked under the old rule both ways (the stack is at head)
    task, _, _ = outcomes[TaskStatus.SUCCEEDED]
    command.downgrade(alembic_config(stack.database_url), "0019")
    try:
        assert _wasted(stack, task.import_id)["duplicate"] > 0  # the old rule, as it was
    finally:
        upgrade(stack.database_url)
    assert _wasted(stack, task.import_id)["duplicate"] == 0
    await _no_drift(task.import_id)


async def _no_drift(import_id: str) -> None:
    check = await run_cli_async("ledger", "check", import_id, "--skip-storage", "--json")
    rules = {r["rule"]: r for r in check.json["rules"]}
    for rule in ("import_totals_drift", "totals_drift"):
        assert rules[rule]["checked"] and not rules[rule]["violations"], rules[rule]
