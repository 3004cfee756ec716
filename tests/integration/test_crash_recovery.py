"""SIGKILL the real worker process mid-run: every task still ends SUCCEEDED, one provider job each."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest
from stack_helpers import assert_ledger_balanced, import_small, run_all, stop_gates_of

import devstack
from control.starting import start_workflows
from schema import queries
from schema.db import Database

pytestmark = [pytest.mark.integration, pytest.mark.long]

IN_FLIGHT = {"DISPATCHING", "SUBMIT_UNKNOWN", "SUBMITTED", "RUNNING", "OUTPUT_FETCHING", "POST_PROCESSING"}


@pytest.mark.timeout(600)  # its run may take 300 s, after a worker restart
async def test_worker_sigkill_mid_run(stack, client, tmp_path, emulator_jobs):
    products = [(f"K-{i}", f"Item {i}", f"Thing number {i}") for i in range(3)]
    summary = import_small(stack, tmp_path, products, ratios=("9:16", "16:9"))
    db = Database(stack.database_url)
    with db.transaction() as session:
        tasks = queries.list_tasks(session, summary.import_id)
    assert len(tasks) == 6

    devstack.up(stack, services=["worker"])
    try:
        await start_workflows(client, tasks, summary.import_id, stack.task_queue)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            with db.transaction() as session:
                counts = queries.status_counts(session, summary.import_id)
            if IN_FLIGHT & set(counts):
                break
            await asyncio.sleep(0.2)
        else:
            pytest.fail(f"no task got in flight: {counts}")
        devstack.kill_service(stack, "worker", signal.SIGKILL)
        await asyncio.sleep(1)
        devstack.restart_service(stack, "worker")
        finished = await run_all(client, stack, summary.import_id, stack.task_queue, timeout=300)
    finally:
        devstack.kill_service(stack, "worker", signal.SIGTERM)
        await stop_gates_of(client, stack.task_queue)  # the stack's queue has no worker after this test

    assert [t.status for t in finished] == ["SUCCEEDED"] * 6, counts
    keys = [j["request_key"] for j in emulator_jobs()]
    for task in finished:
        assert sum(k.startswith(task.id) for k in keys) == 1, task.id
    assert_ledger_balanced(stack, [t.id for t in finished])
