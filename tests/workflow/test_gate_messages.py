"""The task's messages with its provider's gate on the time-skipping server. renew-in-submit-v1: the
submit step tells the gate of an accepted submit (the renewal that carries the AIMD increase) after its
transaction B, so the task's history holds no renew signal of its own. grant-at-once-v1: request_slot
asks with the gate's `ask` update, whose answer is the slot when one is free, so a task that does not
wait gets no grant signal and spends no re-ask timer. Activity workers from before the patches leave
both to the workflow, as before. release-in-step-v1: the status call that sees the job end gives the slot
back itself. local-db-steps-v1: reserve_credit and settle run as local activities.

`REELQUEUE_RECORD_HISTORIES=1` records the histories into tests/fixtures/histories/generation/<patch>/.
"""

from __future__ import annotations

import pytest
from temporalio.client import WorkflowHandle
from workflow_fakes import World, ending, job

from contracts import workflow_api as api
from contracts.provider import JobStatus
from workflows.generation.patches import GRANT_AT_ONCE, LOCAL_DB_STEPS, RENEW_IN_SUBMIT

HISTORY_FOLDER = RENEW_IN_SUBMIT


async def signals_received(handle: WorkflowHandle) -> list[str]:
    history = await handle.fetch_history()
    return [e.workflow_execution_signaled_event_attributes.signal_name for e in history.events
            if e.HasField("workflow_execution_signaled_event_attributes")]


async def timers(handle: WorkflowHandle) -> int:
    history = await handle.fetch_history()
    return sum(e.HasField("timer_started_event_attributes") for e in history.events)


async def signals_sent(handle: WorkflowHandle) -> list[str]:
    """The signals the workflow sent to other workflows (the gate), in order."""
    history = await handle.fetch_history()
    return [e.signal_external_workflow_execution_initiated_event_attributes.signal_name for e in history.events
            if e.HasField("signal_external_workflow_execution_initiated_event_attributes")]


async def test_the_submit_step_tells_the_gate_of_the_acceptance(world: World, run_world):
    handle = await run_world()
    assert await ending(handle) == "completed"
    assert world.moves()[-1] == "SUCCEEDED" and world.balanced()
    [renewal] = world.renewed
    assert (renewal.token, renewal.accepted, renewal.workflow_id) == (1, True, handle.id)
    [sent] = world.called("submit")
    [queue] = world.queues["submit"]
    assert sent.gate_id == api.gate_id("fake", queue), "the gate that granted the slot"
    assert await signals_sent(handle) == [], "no renew and no release of its own"


@pytest.mark.histories(LOCAL_DB_STEPS)
async def test_the_status_call_that_sees_the_job_end_gives_the_slot_back(world: World, run_world):
    """release-in-step-v1: the poll step that observed the job terminal released the slot at the gate
    after its transaction; the workflow sends no signal and its gate holds nothing."""
    handle = await run_world()
    assert await ending(handle) == "completed"
    [release] = world.released
    assert (release.token, release.workflow_id) == (1, handle.id)
    assert await signals_sent(handle) == []
    polls = world.called("poll_job")
    assert polls[-1].release == release and all(p.gate_id for p in polls)


@pytest.mark.histories(LOCAL_DB_STEPS)
async def test_the_database_steps_run_as_local_activities(world: World, run_world):
    """local-db-steps-v1: reserve_credit and settle are markers of the workflow task that asked for
    them, not activities of their own; lean-path-v1 (which stands for it) folds them into the prepare
    and media steps. The ledger closes as before."""
    handle = await run_world()
    assert await ending(handle) == "completed"
    history = await handle.fetch_history()
    scheduled = {e.activity_task_scheduled_event_attributes.activity_type.name for e in history.events
                 if e.HasField("activity_task_scheduled_event_attributes")}
    assert scheduled.isdisjoint({"reserve_credit", "settle", "validate_task"}) and "prepare_task" in scheduled
    assert world.called("prepare_task") and world.called("make_media") and world.balanced()


async def test_a_step_that_could_not_tell_the_gate_leaves_the_renewal_to_the_workflow(world: World, run_world):
    world.carries = False  # activity workers from before the patch
    handle = await run_world()
    assert await ending(handle) == "completed"
    assert world.renewed == [] and world.balanced()
    assert await signals_sent(handle) == [api.SIGNAL_GATE_RENEW, api.SIGNAL_GATE_RELEASE]


@pytest.mark.histories(GRANT_AT_ONCE)
async def test_a_task_the_gate_has_room_for_gets_its_slot_in_the_answer(world: World, run_world):
    world.polls = [job(JobStatus.SUCCEEDED)]  # no poll pause: the task's only timer would be the re-ask
    handle = await run_world()
    assert await ending(handle) == "completed"
    assert world.moves()[-1] == "SUCCEEDED" and world.balanced()
    [asked] = world.called("request_slot")
    assert asked.at_once
    assert await signals_received(handle) == [], "no grant signal"
    assert await timers(handle) == 0, "no re-ask timer started and cancelled"


@pytest.mark.histories(GRANT_AT_ONCE)
async def test_a_gate_without_the_ask_grants_by_signal(world: World, run_world):
    world.carries = False  # activity workers from before the patch ask by signal
    world.polls = [job(JobStatus.SUCCEEDED)]
    handle = await run_world()
    assert await ending(handle) == "completed"
    assert await signals_received(handle) == [api.SIGNAL_SLOT_GRANTED]
