"""A worker SIGKILLed while its tasks hold provider slots, and kept down longer than the gate's
lease: slots belong to workflows, not processes, so nobody else is granted a slot whose job may
still be alive; once a worker is back the gate finds the leases expired, checks their holders, and
the freed capacity is granted again. The test waits on each of those states (the time to the
second grant is a figure it prints)."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid

import httpx
import pytest
from sqlalchemy import select
from stack_helpers import import_small, run_all

import devstack
from contracts import workflow_api as api
from contracts.admission import GateSnapshot
from control.starting import start_workflows
from schema import queries
from schema.db import Database
from schema.models import StateEvent

pytestmark = [pytest.mark.integration, pytest.mark.long]

LIMIT, LEASE_S, TASKS = 2, 20, 6
# The first jobs outlive the outage and a slow worker restart with room to spare: they must still
# run when the gate, back with its worker, finds their leases expired and checks their holders.
FIRST_JOB_S = LEASE_S + 100
BACK_WITHIN_S = FIRST_JOB_S + 120  # generous: the first jobs end, their slots go to the next tasks


async def _snapshot(client, queue: str) -> GateSnapshot:
    return await client.get_workflow_handle(api.gate_id("emulator", queue)).query(
        api.QUERY_GATE_SNAPSHOT, result_type=GateSnapshot)


async def _until(check, timeout_s: float, what: str):  # noqa: ANN001, ANN202 - an async predicate
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if (value := await check()) is not None:
                return value
        except Exception:  # noqa: BLE001 - the gate may not exist yet, or no worker answers the query
            pass
        await asyncio.sleep(0.5)
    pytest.fail(f"{what} within {timeout_s} s")


@pytest.mark.timeout(900)  # its run may take 300 s, after a worker restart and 2-minute first jobs
async def test_slots_survive_a_sigkilled_worker_and_come_back(stack, client, tmp_path, monkeypatch, emulator_jobs):
    queue = f"crash-{uuid.uuid4().hex[:10]}"
    monkeypatch.setenv("REELQUEUE_TASK_QUEUE", queue)  # the worker process reads these
    monkeypatch.setenv("REELQUEUE_GATE_LEASE_S", str(LEASE_S))
    products = [(f"G-{i}", f"Gate item {i}", f"Thing {i}") for i in range(TASKS)]
    summary = import_small(stack, tmp_path, products, duration_s=1,
                           extra=f"[providers.emulator]\nmax_concurrent = {LIMIT}\n")
    db = Database(stack.database_url)
    with db.transaction() as session:
        tasks = queries.list_tasks(session, summary.import_id)
    httpx.delete(f"{stack.emulator_url}/_sim/stats", timeout=10)
    # Granted together, the first jobs would otherwise end before the gate sees their leases expired,
    # and release instead of being probed (their time is fixed when they start). Later jobs are short.
    _tune(stack, job_seconds=FIRST_JOB_S)
    devstack.up(stack, services=["worker"])
    try:
        await start_workflows(client, tasks, summary.import_id, queue)
        await _until(lambda: _held(client, queue, stack), 60, "the first tasks never held both slots with their jobs")
        devstack.kill_service(stack, "worker", signal.SIGKILL)
        _tune(stack, job_seconds=2)
        # Down at least a lease (a lower bound, not a window: a busy machine only makes it longer).
        await asyncio.sleep(LEASE_S + 5)
        back = time.monotonic()
        devstack.restart_service(stack, "worker")
        probed = await _until(lambda: _probes(client, queue), BACK_WITHIN_S, "no check of the expired leases")
        await _until(lambda: _granted_more_than(client, queue, LIMIT), BACK_WITHIN_S, "no slot granted again")
        regranted_after = time.monotonic() - back
        finished = await run_all(client, stack, summary.import_id, queue, timeout=300)
        snapshot = await _snapshot(client, queue)
        probes = await _probes(client, queue) or []
        await client.get_workflow_handle(api.gate_id("emulator", queue)).terminate("test over")
    finally:
        httpx.delete(f"{stack.emulator_url}/_sim/faults", timeout=10)
        devstack.kill_service(stack, "worker", signal.SIGTERM)
    stats = httpx.get(f"{stack.emulator_url}/_sim/stats", timeout=10).json()
    print(f"\nleases checked {len(probed)} times, slots granted again {regranted_after:.1f} s after the worker "
          f"was restarted; {len(probes)} lease probes; emulator {stats}")

    assert [t.status for t in finished] == ["SUCCEEDED"] * TASKS
    assert probes, "the holders' leases expired while the worker was down, so the gate checked them"
    assert stats["max_alive"] <= LIMIT, stats  # ... and kept their slots while their jobs still ran
    assert (snapshot.in_use, snapshot.waiting, snapshot.granted) == (0, 0, TASKS)
    with db.transaction() as session:
        dispatches = session.scalars(select(StateEvent).where(
            StateEvent.task_id.in_([t.id for t in tasks]), StateEvent.event == "dispatch_claimed",
            StateEvent.applied.is_(True))).all()
    tokens = [e.payload["slot"] for e in dispatches]
    assert sorted(tokens) == list(range(1, TASKS + 1))  # fencing: every attempt had a slot of its own
    keys = [j["request_key"] for j in emulator_jobs()]
    assert all(sum(k.startswith(t.id) for k in keys) == 1 for t in finished)


def _tune(stack, **faults: float) -> None:
    httpx.post(f"{stack.emulator_url}/_sim/faults", json=faults, timeout=10).raise_for_status()


async def _held(client, queue: str, stack) -> bool | None:
    """Both slots held and both jobs created at the provider (a submit still in flight at the kill
    would be reconciled as never sent, and its task granted a second slot)."""
    created = httpx.get(f"{stack.emulator_url}/_sim/stats", timeout=10).json()["jobs_created"]
    return True if (await _snapshot(client, queue)).in_use == LIMIT and created >= LIMIT else None


async def _probes(client, queue: str) -> list[str] | None:
    """The gate's checks of expired leases so far (signals to their holders), None while there is none."""
    gate = client.get_workflow_handle(api.gate_id("emulator", queue))
    sent = [e.signal_external_workflow_execution_initiated_event_attributes.signal_name
            for e in (await gate.fetch_history()).events]
    return [name for name in sent if name == api.SIGNAL_SLOT_CHECK] or None


async def _granted_more_than(client, queue: str, n: int) -> bool | None:
    return True if (await _snapshot(client, queue)).granted > n else None
