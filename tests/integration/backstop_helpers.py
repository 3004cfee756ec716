"""Helpers of the provider backstop's tests on the real stack: jobs made behind the API's back, a
task put where its workflow leaves it, `ledger reconcile` until every job in the window ended."""

from __future__ import annotations

import time

import httpx
from cli_helpers import run_cli_async
from sqlalchemy import select
from stack_helpers import import_small

from contracts.task import TaskStatus
from schema import queries
from schema.db import Database
from schema.models import Attempt, CreditEntry, Task

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
