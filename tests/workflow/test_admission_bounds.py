"""The wait for a slot is bounded and survives its gate, on the time-skipping server: a long queue
behind a small limit all succeeds within the task deadline; a task whose deadline passes while
QUEUED ends EXPIRED and leaves the gate's queue; tasks waiting on a gate that is terminated (or
replaced by a fresh run) still get their slots; NEEDS_ATTENTION gives the slot back while no job of
the task may run.

`REELQUEUE_RECORD_HISTORIES=1` records the histories into tests/fixtures/histories/generation/admission-bounded-v1/.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from fleet_fakes import Fleet, FleetRun, running_fleet
from histories import record
from server_clock import terminate_between_tasks
from temporalio.client import WorkflowHandle
from test_generation_paths import FOUND, NOT_ASKABLE
from workflow_fakes import SUCCEEDED, outage, resolve, unknown, until

from contracts import workflow_api as api
from contracts.admission import GateInput, GateSnapshot
from contracts.messages import ResolveAction
from contracts.task import TaskStatus as S
from schema.state_machine import TERMINAL
from workflows.generation.patches import ADMISSION_BOUNDED
from workflows.provider_gate import ProviderGateWorkflow

pytestmark = pytest.mark.long

HISTORY_FOLDER = ADMISSION_BOUNDED  # run_world records this module's single-task paths here


async def snapshot(gate: WorkflowHandle) -> GateSnapshot:
    return await gate.query(api.QUERY_GATE_SNAPSHOT, result_type=GateSnapshot)


async def finish(env, fleet: Fleet, run: FleetRun, step_s: float = 60) -> None:
    """Let skipped time pass until every task of the run has ended (awaiting many results at once
    on the time-skipping server stalls its clock)."""
    tasks = [h.id.split("-")[1] for h in run.handles]
    await until(env, lambda: all(fleet.status[t] in TERMINAL for t in tasks), step_s=step_s)


@pytest.mark.timeout(900)  # 100 workflows on their own server: 52 s alone, 538 s in a loaded suite
async def test_100_tasks_behind_a_limit_of_2_all_succeed_within_their_deadlines(own_env):
    """Hours of queue (100 x 3-minute jobs / 2 = 2.5 h): no fresh job is cancelled as 'past its
    deadline'. The queue's length, not the number of workflows, is what a deadline meets: 200 tasks
    behind 5 made a shorter queue at twice the CPU (177 s of a loaded suite, once past its RPC timeout)."""
    fleet = Fleet(limit=2, job_s=180.0)
    async with running_fleet(own_env, fleet) as run:
        tasks = [f"t{i:03d}" for i in range(100)]
        await asyncio.gather(*(run.start(task_id) for task_id in tasks))
        await finish(own_env, fleet, run, step_s=120)  # a step a starved worker crosses within its RPC deadline
        last = await snapshot(run.gate)
        last_in_line = next(h for h in run.handles if h.id.startswith("gen-t099-"))
        await record(last_in_line, ADMISSION_BOUNDED, "hundred_tasks_last_in_line")
    assert {fleet.status[t] for t in tasks} == {S.SUCCEEDED}
    assert fleet.cancelled() == [] and {fleet.jobs_of(t) for t in tasks} == {1}
    assert all(fleet.balanced(t) for t in tasks)
    validated = fleet.validated_at
    # When each workflow closed (server time; settle runs as a local activity, which sees wall time)
    ended = {h.id.split("-")[1]: (await h.describe()).close_time for h in run.handles}
    queue_h = (max(ended.values()) - min(validated.values())).total_seconds() / 3600
    assert queue_h > 2, queue_h  # the queue lasted hours: longer than a job deadline
    assert all(ended[t] - validated[t] < timedelta(seconds=fleet.task_deadline_s) for t in tasks)
    assert last.in_use == 0 and last.waiting == 0 and last.granted == 100


async def test_a_task_whose_deadline_passes_while_queued_expires_and_leaves_the_queue(own_env):
    fleet = Fleet(limit=1, job_s=40 * 60.0, task_deadline_s=3600.0)
    async with running_fleet(own_env, fleet) as run:
        for task_id in ("first", "second", "third"):
            await run.start(task_id)
            await own_env.sleep(1)  # asks in this order
        await until(own_env, lambda: fleet.status["third"] in (S.EXPIRED, S.DISPATCHING, S.SUBMITTED))
        gate = await snapshot(run.gate)
        await finish(own_env, fleet, run)
        await record(run.handles[-1], ADMISSION_BOUNDED, "deadline_passes_while_queued")
    assert fleet.status["third"] is S.EXPIRED and fleet.jobs_of("third") == 0
    assert fleet.ledger["third"] == {"RESERVE": 4, "SETTLE": 0, "RELEASE": 4}
    assert gate.waiting == 0 and gate.in_use == 1  # it left the queue; "second" holds the slot
    assert fleet.status["first"] is S.SUCCEEDED and fleet.status["second"] is S.SUCCEEDED


@pytest.mark.parametrize("restarted", [False, True], ids=["terminated", "terminated-then-restarted"])
async def test_tasks_waiting_on_a_gate_that_is_terminated_still_get_their_slots(own_env, restarted):
    """Terminated: nothing answers the re-ask signal, so the task's request starts a new gate.
    Restarted at once (as a reset would leave it): a gate that runs but has never heard of them."""
    fleet = Fleet(limit=2, job_s=180.0)
    async with running_fleet(own_env, fleet) as run:
        tasks = [f"w{i:02d}" for i in range(10)]
        for task_id in tasks:
            await run.start(task_id)
        await until(own_env, lambda: sum(fleet.status[t] is S.SUCCEEDED for t in tasks) >= 2, step_s=10)
        before = await snapshot(run.gate)
        assert before.waiting > 0
        await terminate_between_tasks(own_env, [run.gate])  # as an operator would (between tasks: the clock)
        if restarted:
            await own_env.client.start_workflow(ProviderGateWorkflow.run, GateInput(provider="fake", limit=2),
                                                id=run.gate.id, task_queue=run.queue)
        await finish(own_env, fleet, run)
        after = await snapshot(run.gate)
        name = f"gate_{'restarted' if restarted else 'terminated'}_while_waiting"
        await record(run.handles[-1], ADMISSION_BOUNDED, name)
    assert {fleet.status[t] for t in tasks} == {S.SUCCEEDED}
    assert {fleet.jobs_of(t) for t in tasks} == {1} and fleet.cancelled() == []
    assert max(fleet.requests.values()) >= (1 if restarted else 2)  # terminated: asked again by activity
    assert after.waiting == 0 and after.in_use == 0


async def gate_of(env, handle: WorkflowHandle) -> WorkflowHandle:
    queue = (await handle.describe()).task_queue
    return env.client.get_workflow_handle(api.gate_id("fake", queue))


async def test_attention_after_an_unknown_submit_gives_the_slot_back_and_asks_again_on_retry(env, world,
                                                                                           run_world):
    """An unknown submit may have made a job we cannot see: the slot is kept for one job deadline,
    then given back; `resolve --retry` asks the gate again before the step runs again."""
    world.deadline_s = 1800
    world.submits, world.reconciles = [unknown()], [NOT_ASKABLE, FOUND]
    handle = await run_world()
    gate = await gate_of(env, handle)
    await until(env, lambda: world.status is S.NEEDS_ATTENTION)
    assert (await snapshot(gate)).in_use == 1  # a job of it may still run
    await env.sleep(world.deadline_s + 60)
    assert (await snapshot(gate)).in_use == 0 and world.status is S.NEEDS_ATTENTION
    await resolve(handle, ResolveAction.RETRY, "provider's lookup is back")
    await until(env, lambda: len(world.called("reconcile_submit")) == 2)
    assert len(world.called("request_slot")) == 2
    assert await asyncio.wait_for(handle.result(), timeout=60)
    assert world.status is S.SUCCEEDED and len(world.called("submit")) == 1
    assert (await snapshot(gate)).in_use == 0


async def test_attention_with_a_live_job_keeps_the_slot(env, world, run_world):
    world.deadline_s = 900
    up = {"ok": False}
    world.polls = [lambda: SUCCEEDED if up["ok"] else outage()]

    handle = await run_world()
    gate = await gate_of(env, handle)
    await until(env, lambda: world.status is S.NEEDS_ATTENTION)
    await env.sleep(3 * 3600)
    assert (await snapshot(gate)).in_use == 1 and len(world.called("request_slot")) == 1
    up["ok"] = True
    await resolve(handle, ResolveAction.RETRY, "status API is back")
    assert await asyncio.wait_for(handle.result(), timeout=60)
    assert (await snapshot(gate)).in_use == 0 and len(world.called("request_slot")) == 1

