"""renew-in-submit-v1 on the time-skipping server: the submit step tells the provider's gate of an
accepted submit (the renewal that carries the AIMD increase) after its transaction B, so the task's
history holds no renew signal of its own; a step that could not tell it (an activity worker from
before the patch) leaves the renewal to the workflow, as before.

`REELQUEUE_RECORD_HISTORIES=1` records the histories into tests/fixtures/histories/renew-in-submit-v1/.
"""

from __future__ import annotations

from temporalio.client import WorkflowHandle
from workflow_fakes import World, ending

from workflows import api
from workflows.generation import RENEW_IN_SUBMIT

HISTORY_FOLDER = RENEW_IN_SUBMIT


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
    assert await signals_sent(handle) == [api.SIGNAL_GATE_RELEASE], "the release only: no renew of its own"


async def test_a_step_that_could_not_tell_the_gate_leaves_the_renewal_to_the_workflow(world: World, run_world):
    world.carries = False  # activity workers from before the patch
    handle = await run_world()
    assert await ending(handle) == "completed"
    assert world.renewed == [] and world.balanced()
    assert await signals_sent(handle) == [api.SIGNAL_GATE_RENEW, api.SIGNAL_GATE_RELEASE]
