"""Money on the rare paths, on the time-skipping server: a cancel that meets a slot's grant never
submits; a paused task holds no slot of any layer; a takeover follows the job it stopped until the
provider says it ended (its cost booked, never released at 0); `resolve --fail` cancels a live job
first; a cancel during the delivery of a paid video is too late, review templates included.

`REELQUEUE_RECORD_HISTORIES=1` records each path into tests/fixtures/histories/generation/<patch>/.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from temporalio.client import WorkflowHandle
from test_admission_bounds import snapshot
from test_generation_paths import cancel, cancelled_jobs, closed_as_canceled, entered
from workflow_fakes import (
    CANCELED,
    RUNNING,
    SUCCEEDED,
    ending,
    job,
    outage,
    refusal,
    resolve,
    review_policy,
    until,
)

from activities import admission
from contracts import workflow_api as api
from contracts.admission import GateInput, SlotGrant, SlotRelease, SlotRequest
from contracts.messages import CancelRequest, PauseRequest, ResolveAction
from contracts.provider import JobStatus
from contracts.task import TaskStatus as S
from workflows.generation.patches import (
    ATTENTION_TAKES_CANCEL,
    CANCEL_BEFORE_SUBMIT,
    FAIL_STOPS_JOB,
    LATE_CANCEL_DELIVERS,
    PAUSE_HOLDS_NOTHING,
    TAKEOVER_FOLLOWS,
)
from workflows.generation.steps import REASK_EVERY


async def gates(env, handle: WorkflowHandle) -> tuple[WorkflowHandle, WorkflowHandle]:
    """The task's provider gate and its tenant's gate."""
    queue = (await handle.describe()).task_queue
    return (env.client.get_workflow_handle(api.gate_id("fake", queue)),
            env.client.get_workflow_handle(api.gate_id(api.tenant_gate("default"), queue)))


async def occupy(env, gate: WorkflowHandle, layer: str = "fake") -> SlotRequest:
    """Another task takes the only slot of `layer`'s gate (the provider's by default)."""
    queue = gate.id.removeprefix(api.gate_id(layer, ""))
    someone = SlotRequest(workflow_id="another-task", task_id="t0")
    assert await admission.ask_gate(env.client, GateInput(provider=layer, limit=1), gate.id, queue, someone)
    return someone


async def waiting_in_line(env, gate: WorkflowHandle) -> None:
    for _ in range(60):
        if (await snapshot(gate)).waiting == 1:
            return
        await env.sleep(1)
    raise AssertionError("the task never waited in its gate's line")


# -- a cancel that meets a grant ---------------------------------------------------------------


@pytest.mark.histories(CANCEL_BEFORE_SUBMIT)
@pytest.mark.parametrize("how", ["signal", "temporal"])
async def test_a_cancel_while_the_slot_is_asked_never_submits(env, world, run_world, how):
    """The gate answers the ask with a free slot while a cancel waits: the slot goes back unused."""
    world.hold("request_slot")
    handle = await run_world()
    await entered(world, "request_slot")
    await cancel(handle, how)
    world.release("request_slot")
    assert await ending(handle) == closed_as_canceled(how)
    assert world.status is S.CANCELED and world.called("submit") == []
    assert world.sums() == {"RESERVE": 4, "RELEASE": 4}
    gate, _ = await gates(env, handle)
    now = await snapshot(gate)
    assert (now.in_use, now.waiting) == (0, 0)


@pytest.mark.histories(CANCEL_BEFORE_SUBMIT)
@pytest.mark.worker_restarts
async def test_a_grant_and_a_cancel_in_one_activation_never_submit(own_env, world, run_world):
    """A task waiting in line (its ask answered without a slot) gets its grant signal in the same
    activation as the cancel: the cancel wins and the slot is given back."""
    env = own_env
    world.limit = 1
    world.hold("request_slot")
    handle = await run_world()
    await entered(world, "request_slot")
    gate, _ = await gates(env, handle)
    await occupy(env, gate)
    world.release("request_slot")
    await waiting_in_line(env, gate)
    async with run_world.worker_stopped():  # both reach the workflow when it is back
        await handle.signal(api.SIGNAL_SLOT_GRANTED, SlotGrant(token=1))
        await handle.signal(api.SIGNAL_CANCEL, CancelRequest(reason="test", requested_by="test"))
    assert await ending(handle) == "completed"
    assert world.status is S.CANCELED and world.called("submit") == []
    assert world.sums() == {"RESERVE": 4, "RELEASE": 4}
    assert (await snapshot(gate)).waiting == 0


async def test_an_ask_whose_answer_was_lost_gets_its_slot_again_at_once(env, world, run_world):
    """Shown wrong: an ask the gate admitted (the slot is the task's) whose answer was lost falls back to
    a request signal; the gate sees its holder ask again and grants the same slot again at once, so no
    slot sits idle until the task's next re-ask."""
    world.ask_answers_lost = 1
    handle = await run_world()
    assert await ending(handle) == "completed"
    waited = world.times("submit")[0] - world.times("request_slot")[0]
    assert waited < REASK_EVERY / 10 and len(world.called("request_slot")) == 1
    gate, _ = await gates(env, handle)
    now = await snapshot(gate)
    assert (now.granted, now.in_use) == (1, 0)


async def test_a_cancel_during_the_poll_that_sees_success_is_too_late(world, run_world):
    """Shown wrong: a cancel never moves a paid task (OUTPUT_FETCHING on) to CANCEL_REQUESTED, so a
    refused COMPLETION_WON cannot leave it there: the poll that saw success wins, SUCCEEDED, TOO_LATE."""
    world.polls = [SUCCEEDED]
    world.hold("poll_job")
    handle = await run_world()
    await entered(world, "poll_job")
    await cancel(handle, "signal")
    world.release("poll_job")
    assert await ending(handle) == "completed"
    assert "CANCEL_REQUESTED" not in world.moves() and world.status is S.SUCCEEDED
    assert world.transitions[-1].cancel_outcome == "TOO_LATE" and cancelled_jobs(world) == []


# -- a paused task holds nothing -----------------------------------------------------------------


@pytest.mark.histories(PAUSE_HOLDS_NOTHING)
async def test_a_paused_task_holds_no_tenant_slot(env, world, run_world):
    """Paused from the start: it is in no line and holds no slot, its tenant's or its provider's."""
    world.paused_by, world.tenant_limit = "ops", 1
    handle = await run_world()
    await until(env, lambda: world.status is S.QUEUED, step_s=1.0)
    await env.sleep(3600)
    gate, tenant = await gates(env, handle)
    assert world.called("request_slot") == []
    await handle.signal(api.SIGNAL_PAUSE, PauseRequest(paused=False, by="ops"))
    assert await ending(handle) == "completed"
    asks = world.called("request_slot")
    assert [a.provider for a in asks] == [api.tenant_gate("default"), "fake"]
    assert (await snapshot(tenant)).in_use == 0 and world.balanced()


@pytest.mark.histories(PAUSE_HOLDS_NOTHING)
async def test_a_task_paused_while_in_line_gives_its_tenant_slot_back(env, world, run_world):
    """Paused while it waits in its provider's line holding its tenant's slot: it leaves that line and
    gives its tenant's slot back (another task of the tenant may run), then asks both again once resumed."""
    world.tenant_limit, world.limit = 1, 1
    world.hold("request_slot")
    handle = await run_world()
    await entered(world, "request_slot")  # the tenant's ask
    gate, tenant = await gates(env, handle)
    other = await occupy(env, gate)
    world.release("request_slot")
    await waiting_in_line(env, gate)
    assert (await snapshot(tenant)).in_use == 1
    await handle.signal(api.SIGNAL_PAUSE, PauseRequest(paused=True, by="ops"))
    await env.sleep(600)  # within the other's lease
    paused_gate, paused_tenant = await snapshot(gate), await snapshot(tenant)
    await gate.signal(api.SIGNAL_GATE_RELEASE, SlotRelease(workflow_id=other.workflow_id, token=1))
    await handle.signal(api.SIGNAL_PAUSE, PauseRequest(paused=False, by="ops"))
    assert await ending(handle) == "completed"
    assert (paused_gate.in_use, paused_gate.waiting) == (1, 0)  # only the other task's
    assert (paused_tenant.in_use, paused_tenant.waiting) == (0, 0)
    assert [a.provider for a in world.called("request_slot")] == [api.tenant_gate("default"), "fake"] * 2
    assert len(world.called("submit")) == 1 and world.balanced()
    assert (await snapshot(tenant)).in_use == 0


# -- a takeover follows the job it stopped -------------------------------------------------------


async def taken_over_while_running(env, world, run_world) -> WorkflowHandle:
    """The task is ended in Postgres (an operator) while its job runs: the next poll sees it."""
    world.polls = [RUNNING]
    world.hold("poll_job")
    handle = await run_world()
    await entered(world, "poll_job")
    world.status = S.CANCELED
    return handle


@pytest.mark.histories(TAKEOVER_FOLLOWS)
async def test_a_takeover_with_an_asynchronous_cancel_books_what_the_job_cost(env, world, run_world):
    """The provider takes the cancel but stops the job later: its cost is settled once it is known."""
    handle = await taken_over_while_running(env, world, run_world)
    world.cancels = [job(JobStatus.RUNNING)]
    world.polls = [RUNNING, RUNNING, job(JobStatus.CANCELED, cost=1.5)]
    world.release("poll_job")
    assert await ending(handle) == "completed"
    assert cancelled_jobs(world) == ["job-1"] and len(world.called("poll_job")) >= 3
    assert world.sums() == {"RESERVE": 4, "SETTLE": Decimal("1.5"), "RELEASE": Decimal("2.5")}


@pytest.mark.histories(TAKEOVER_FOLLOWS)
async def test_a_takeover_with_the_cancel_api_down_holds_the_reservation(env, world, run_world):
    """The cancel call runs out of tries: the workflow keeps the reservation and asks again later,
    never failing with it open nor releasing it while the job may bill."""
    up = {"ok": False}
    handle = await taken_over_while_running(env, world, run_world)
    world.cancels = [lambda: CANCELED if up["ok"] else outage()]
    world.release("poll_job")
    await until(env, lambda: len(world.called("cancel_job")) > 45)
    assert world.held() == 4 and not world.called("settle")
    assert (await handle.describe()).status.name == "RUNNING"
    up["ok"] = True
    assert await ending(handle) == "completed"
    assert world.sums() == {"RESERVE": 4, "RELEASE": 4} and world.status is S.CANCELED


# -- resolve --fail at poll cancels the job first ------------------------------------------------


@pytest.mark.histories(FAIL_STOPS_JOB)
async def test_failing_a_task_stuck_at_poll_cancels_its_job_first(env, world, run_world):
    world.polls = [refusal()]
    world.cancels = [job(JobStatus.CANCELED, cost=0.5)]
    handle = await run_world()
    await until(env, lambda: world.status is S.NEEDS_ATTENTION)
    await resolve(handle, ResolveAction.FAIL, "job looks stuck at the provider")
    assert await ending(handle) == "failed:FAILED_FINAL"
    assert cancelled_jobs(world) == ["job-1"] and world.abandoned == []
    assert world.sums() == {"RESERVE": 4, "SETTLE": Decimal("0.5"), "RELEASE": Decimal("3.5")}


@pytest.mark.histories(FAIL_STOPS_JOB)
async def test_failing_a_task_whose_job_cannot_be_cancelled_abandons_it(env, world, run_world):
    """The provider refuses the cancel the decision asks for: the job is then abandoned, as the same
    decision says (a person already chose to fail the task)."""
    world.polls = [refusal()]
    world.cancels = [refusal("cancel refused")]
    handle = await run_world()
    await until(env, lambda: world.status is S.NEEDS_ATTENTION)
    await resolve(handle, ResolveAction.FAIL, "job looks stuck at the provider")
    assert await ending(handle) == "failed:FAILED_FINAL"
    assert cancelled_jobs(world) == ["job-1"] and world.abandoned == [1] and world.balanced()


# -- completion wins during delivery, review templates included ----------------------------------


@pytest.mark.histories(LATE_CANCEL_DELIVERS)
@pytest.mark.parametrize("step", ["fetch_output", "make_media"])
async def test_a_cancel_during_delivery_of_a_review_template_is_too_late(world, run_world, step):
    world.review = review_policy()
    world.hold(step)
    handle = await run_world()
    await entered(world, step)
    await cancel(handle, "signal")
    world.release(step)
    assert await ending(handle) == "completed"
    assert world.status is S.SUCCEEDED and "CANCELED" not in world.moves()
    assert world.transitions[-1].cancel_outcome == "TOO_LATE"
    assert world.sums() == {"RESERVE": 4, "SETTLE": 3, "RELEASE": 1}


@pytest.mark.histories(ATTENTION_TAKES_CANCEL)
async def test_a_cancel_in_needs_attention_with_a_live_job_stops_it(env, world, run_world):
    """A cancel while the task waits for a person with a job alive: the job is cancelled and the task
    ends CANCELED, without waiting for a decision."""
    world.polls = [refusal()]
    handle = await run_world()
    await until(env, lambda: world.status is S.NEEDS_ATTENTION)
    await cancel(handle, "temporal")
    assert await ending(handle) == "canceled"
    assert cancelled_jobs(world) == ["job-1"] and world.status is S.CANCELED and world.balanced()

