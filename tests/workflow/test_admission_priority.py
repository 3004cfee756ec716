"""Priority classes at the gates on the time-skipping server (gate-priority-v1): a tenant API's
interactive generations go before the bulk work that waits at the same gate, but a bulk request is
overtaken only by requests asked within BULK_LAG after its own, so no bulk task starves.

`REELQUEUE_RECORD_HISTORIES=1` records the histories into tests/fixtures/histories/<workflow>/gate-priority-v1/.
"""

from __future__ import annotations

import asyncio

import pytest
from fleet_fakes import Fleet, running_fleet
from histories import record
from test_admission_bounds import finish, snapshot
from workflow_fakes import until

from contracts.admission import PriorityClass
from contracts.task import TaskStatus as S
from workflows.provider_gate import BULK_LAG, PRIORITY

pytestmark = pytest.mark.long

BULK, INTERACTIVE = PriorityClass.BULK, PriorityClass.INTERACTIVE


def submitted(fleet: Fleet) -> dict[str, float]:
    """task -> when its (only) job was submitted, in seconds of server time."""
    return {j.task_id: j.submitted_at.timestamp() for j in fleet.jobs.values()}


async def test_five_api_generations_go_before_100_queued_bulk_tasks(own_env):
    """A queue of 100 is as long as the ordering needs (200 doubled the test's CPU for nothing more)."""
    bulk, api = [f"b{i:03d}" for i in range(100)], [f"i{i}" for i in range(5)]
    fleet = Fleet(limit=2, job_s=60.0, priorities={**dict.fromkeys(bulk, BULK), **dict.fromkeys(api, INTERACTIVE)})
    async with running_fleet(own_env, fleet) as run:
        await asyncio.gather(*(run.start(t) for t in bulk))
        await until(own_env, lambda: all(t in fleet.asked_at for t in bulk), step_s=1)
        for task_id in api:
            await run.start(task_id)
        await until(own_env, lambda: all(t in fleet.asked_at for t in api), step_s=1)
        arrived = max(fleet.asked_at[t] for t in api).timestamp()
        assert arrived - min(fleet.asked_at[t] for t in bulk).timestamp() < BULK_LAG.total_seconds()
        await finish(own_env, fleet, run, step_s=120)  # a step a starved worker crosses within its RPC deadline
        gate = await snapshot(run.gate)
        await record(run.handles[-1], PRIORITY, "interactive_behind_bulk")
        await record(run.gate, PRIORITY, "gate_with_bulk_and_interactive")
    assert {fleet.status[t] for t in bulk + api} == {S.SUCCEEDED}
    at = submitted(fleet)
    still_waiting = [t for t in bulk if at[t] > arrived]
    assert len(still_waiting) > 90  # the 100 were still queued when the 5 came
    assert max(at[t] for t in api) <= min(at[t] for t in still_waiting)
    assert (gate.in_use, gate.waiting, gate.granted) == (0, 0, 105)


async def test_a_bulk_task_is_overtaken_only_by_requests_asked_within_the_bulk_lag(own_env):
    """b1 waits behind b0's long job: i1, asked within BULK_LAG after b1, goes first; i2, asked later
    than that, does not (b1's wait is overtaken for at most BULK_LAG)."""
    lag = BULK_LAG.total_seconds()
    fleet = Fleet(limit=1, job_s=4 * lag, priorities={"b0": BULK, "b1": BULK, "i1": INTERACTIVE, "i2": INTERACTIVE})
    async with running_fleet(own_env, fleet) as run:
        await run.start("b0")
        await own_env.sleep(1)
        await run.start("b1")
        await own_env.sleep(lag / 3)
        await run.start("i1")
        await own_env.sleep(lag)  # i2 asks more than BULK_LAG after b1
        await run.start("i2")
        await finish(own_env, fleet, run)
        await record(run.handles[1], PRIORITY, "bulk_overtaken_once")
    assert {fleet.status[t] for t in ("b0", "b1", "i1", "i2")} == {S.SUCCEEDED}
    at = submitted(fleet)
    assert sorted(at, key=at.get) == ["b0", "i1", "b1", "i2"]
    assert fleet.validated_at["i2"].timestamp() - fleet.validated_at["b1"].timestamp() > lag


async def test_without_classes_the_line_is_oldest_first(own_env):
    """Tasks with no class (from before priority classes) keep the line of their first asks."""
    fleet = Fleet(limit=1, job_s=600.0)
    async with running_fleet(own_env, fleet) as run:
        for task_id in ("first", "second", "third"):
            await run.start(task_id)
            await own_env.sleep(1)
        await finish(own_env, fleet, run)
    at = submitted(fleet)
    assert sorted(at, key=at.get) == ["first", "second", "third"]
