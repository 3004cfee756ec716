"""A queue longer than the job deadline on the real stack: 20 tasks behind a limit of one job at a
time, each job allowed 30 s. The tasks at the back wait minutes for their slot; each still gets one
provider job that runs to the end (the job deadline counts from the accepted submit, the wait is
bounded by the task deadline only)."""

from __future__ import annotations

import time

import httpx
import pytest
from cli_helpers import run_cli_async
from stack_helpers import import_small, run_all

pytestmark = [pytest.mark.integration, pytest.mark.long]

TASKS = 20
PLAN = "[providers.emulator]\nmax_concurrent = 1\n\n[deadlines]\njob_minutes = 0.5\n"


async def test_20_tasks_behind_one_slot_outlast_the_job_deadline(stack, client, task_queue, tmp_path, emulator_jobs):
    products = [(f"Q-{i:02d}", f"Queued item {i}", f"Thing number {i}") for i in range(TASKS)]
    summary = import_small(stack, tmp_path, products, duration_s=1, extra=PLAN)
    httpx.post(f"{stack.emulator_url}/_sim/faults", json={"job_seconds": 2.0}, timeout=10).raise_for_status()
    started = time.monotonic()
    try:
        finished = await run_all(client, stack, summary.import_id, task_queue, timeout=600)
    finally:
        httpx.delete(f"{stack.emulator_url}/_sim/faults", timeout=10)
    wall = time.monotonic() - started
    print(f"\n{TASKS} tasks behind one slot in {wall:.0f} s")

    assert [t.status for t in finished] == ["SUCCEEDED"] * TASKS, {t.id: t.last_error for t in finished}
    assert wall > 30  # the queue outlasted one job deadline: the back of it waited longer than job_minutes
    keys = [j["request_key"] for j in emulator_jobs()]
    assert {sum(k.startswith(t.id) for k in keys) for t in finished} == {1}
    check = await run_cli_async("ledger", "check", summary.import_id, "--json")
    assert check.code == 0, check.stdout
