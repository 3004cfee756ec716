"""The provider backstop on the real stack: the emulator lists the jobs it ran, `ledger reconcile`
books what the ledger does not account for, `ledger check` lists it.

Each job here is made behind the API's back by the emulator's test hook (`POST /_sim/jobs`): a job
no attempt knows, the first job of an attempt whose duplicate risk a person accepted, a success of
a task that ended CANCELED."""

from __future__ import annotations

import time
import uuid
from decimal import Decimal

import httpx
import pytest
from cli_helpers import run_cli_async
from sqlalchemy import select
from stack_helpers import import_small

from contracts.task import TaskStatus
from schema import queries
from schema.db import Database
from schema.models import Attempt, CreditEntry, StateEvent, StrayJob, Task

pytestmark = pytest.mark.integration

ENDED = {"succeeded", "failed", "canceled"}


def sim_job(stack, request_key: str, duration_s: float = 1.0) -> dict:
    """A job the emulator runs without any submit of ours, followed until it ended."""
    job = httpx.post(f"{stack.emulator_url}/_sim/jobs", timeout=10, json={
        "request_key": request_key, "model": "emu-1", "prompt": "made behind our back",
        "aspect_ratio": "9:16", "duration_s": duration_s}).json()
    deadline = time.monotonic() + 60
    while job["status"] not in ENDED:
        assert time.monotonic() < deadline, f"job {job['id']} still {job['status']}"
        time.sleep(0.2)
        job = next(j for j in httpx.get(f"{stack.emulator_url}/_sim/jobs", timeout=10).json()["jobs"]
                   if j["id"] == job["id"])
    return job


async def reconcile_until_settled(*args: str) -> dict:
    """`ledger reconcile --provider emulator --json`, again while the window holds a job still
    running (another test's): the suite leaves no orphan unbooked."""
    deadline = time.monotonic() + 90
    while True:
        done = await run_cli_async("ledger", "reconcile", "--provider", "emulator", "--since", "1", "--json", *args)
        assert done.code == 0, done.stdout + done.stderr
        pending = [f for f in done.json["findings"] if "booked once it ended" in f["detail"]]
        if not pending:
            return done.json
        assert time.monotonic() < deadline, pending
        time.sleep(0.5)


def ended_task(stack, tmp_path, status: TaskStatus, job_id: str | None, request_key: str,
               attempt_state: str) -> Task:
    """An imported task put where its workflow leaves it (ended, one attempt), without a run."""
    summary = import_small(stack, tmp_path, [("B-1", "Bench", "A bench")], duration_s=1)
    with Database(stack.database_url).transaction() as session:
        (listed,) = queries.list_tasks(session, summary.import_id)
        task = session.get(Task, listed.id)
        task.status, task.provider = status.value, "emulator"
        session.add(Attempt(task_id=task.id, attempt_no=1, provider="emulator", model=task.model,
                            request_key=request_key, provider_job_id=job_id, submit_state=attempt_state,
                            request_fingerprint="0" * 64))
        session.flush()
        session.expunge(task)
    return task


def adjustments_of(stack, job_id: str) -> list[CreditEntry]:
    with Database(stack.database_url).transaction() as session:
        rows = session.scalars(select(CreditEntry).where(CreditEntry.provider_job_id == job_id)).all()
        session.expunge_all()
        return list(rows)


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
