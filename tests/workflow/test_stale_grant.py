"""A grant signal that comes after its slot was given back (the gate sends a holder's grant again when
the holder asked again, and the signal can land after the holder's release and its next ask) is not a
slot: the gate no longer counts it. The task keeps waiting in line for a grant the gate counts
(stale-grant-v1)."""

from __future__ import annotations

import pytest
from test_admission_bounds import snapshot
from test_generation_paths import entered
from test_money_paths import gates, occupy, waiting_in_line
from workflow_fakes import SUCCEEDED, accepted, ending, job, until

from activities import admission
from contracts import workflow_api as api
from contracts.admission import GateInput, SlotGrant, SlotRelease, SlotRequest
from contracts.messages import PauseRequest
from contracts.provider import ErrorClass, JobStatus
from contracts.task import TaskStatus as S
from workflows.generation.patches import STALE_GRANT, STALE_LAYER_RECHECK, STALE_TENANT_GRANT

FAILED_JOB = job(JobStatus.FAILED, cost=0.0, error_class=ErrorClass.RETRYABLE, error="render failed")


@pytest.mark.histories(STALE_GRANT)
async def test_a_stale_grant_after_the_slot_was_given_back_is_not_a_slot(env, world, run_world):
    world.limit = 1
    world.submits = [accepted("job-1"), accepted("job-2")]
    world.polls = [FAILED_JOB, SUCCEEDED]
    world.hold("poll_job")
    handle = await run_world()
    await entered(world, "poll_job")  # attempt 1 runs under the gate's only slot
    world.entered["request_slot"].clear()
    world.hold("request_slot")
    world.release("poll_job")  # the job fails: its slot goes back, and after the retry wait the task asks again
    await entered(world, "request_slot")
    gate, _ = await gates(env, handle)
    await occupy(env, gate)  # meanwhile another task takes the only slot
    world.release("request_slot")
    await waiting_in_line(env, gate)
    first = next(t.payload["slot"] for t in world.transitions if t.event.value == "dispatch_claimed")

    await handle.signal(api.SIGNAL_SLOT_GRANTED, SlotGrant(token=first))  # the first slot's grant, again
    await until(env, lambda: len(world.called("request_slot")) == 3)  # the gate asked whether it is ours
    await env.sleep(60)
    assert len(world.called("submit")) == 1 and world.status is S.QUEUED
    assert await gate.query(api.QUERY_GATE_HOLDERS, result_type=list[str]) == ["another-task"]

    await gate.signal(api.SIGNAL_GATE_RELEASE, SlotRelease(workflow_id="another-task", token=first + 1))
    assert await ending(handle) == "completed"
    await until(env, lambda: world.status is S.SUCCEEDED)
    claims = [t.payload["slot"] for t in world.transitions if t.event.value == "dispatch_claimed"]
    assert claims == [first, first + 2]  # the second attempt ran under the slot the gate granted it


@pytest.mark.histories(STALE_TENANT_GRANT)
async def test_a_stale_tenant_grant_after_a_pause_gave_the_slot_back_is_not_a_slot(env, world, run_world):
    """Paused in its provider's line, the task gives its tenant's slot back; another task of the
    tenant takes it. Resumed, the task asks its tenant's gate again; a grant of the slot it gave back,
    landing now, is not taken: it submits only once the tenant's gate grants it a slot it counts."""
    world.tenant_limit, world.limit = 1, 1
    world.hold("request_slot")
    handle = await run_world()
    await entered(world, "request_slot")  # the tenant's ask: its first slot, token 1
    gate, tenant = await gates(env, handle)
    other = await occupy(env, gate)
    world.release("request_slot")
    await waiting_in_line(env, gate)
    await handle.signal(api.SIGNAL_PAUSE, PauseRequest(paused=True, by="ops"))
    await until(env, lambda: world.status is S.QUEUED, step_s=1.0)
    for _ in range(60):
        if (await snapshot(tenant)).in_use == 0:
            break
        await env.sleep(1)
    tenant_other = await occupy(env, tenant, api.tenant_gate("default"))  # the tenant's other task: token 2
    await gate.signal(api.SIGNAL_GATE_RELEASE, SlotRelease(workflow_id=other.workflow_id, token=1))
    await handle.signal(api.SIGNAL_PAUSE, PauseRequest(paused=False, by="ops"))
    await waiting_in_line(env, tenant)

    await handle.signal(api.SIGNAL_TENANT_SLOT_GRANTED, SlotGrant(token=1))  # the slot it gave back, again
    await env.sleep(600)
    assert world.called("submit") == [] and world.status is S.QUEUED
    assert await tenant.query(api.QUERY_GATE_HOLDERS, result_type=list[str]) == [tenant_other.workflow_id]

    await tenant.signal(api.SIGNAL_GATE_RELEASE, SlotRelease(workflow_id=tenant_other.workflow_id, token=2))
    assert await ending(handle) == "completed"
    assert len(world.called("submit")) == 1 and world.balanced()
    assert (await snapshot(tenant)).in_use == 0


@pytest.mark.histories(STALE_LAYER_RECHECK)
async def test_a_stale_platform_grant_after_the_slot_was_given_back_is_not_a_slot(env, world, run_world):
    """The platform's only slot: attempt 1 runs under it and its job fails, so it goes back; before attempt 2
    asks again another task takes it. A grant of the slot the task gave back, landing now, is not taken: the
    task submits only once the platform's gate grants it a slot it counts."""
    world.platform_limit = 1
    world.submits = [accepted("job-1"), accepted("job-2")]
    world.polls = [FAILED_JOB, SUCCEEDED]
    world.hold("poll_job")
    handle = await run_world()
    await entered(world, "poll_job")  # attempt 1 runs under the platform's only slot
    queue = (await handle.describe()).task_queue
    platform = env.client.get_workflow_handle(api.gate_id(api.PLATFORM_GATE, queue))
    (first,) = [h for h in await platform.query(api.QUERY_GATE_HOLDERS, result_type=list[str])]
    assert first == handle.id
    world.entered["request_slot"].clear()
    world.hold("request_slot")
    world.release("poll_job")  # the job fails: the slots go back, and after the retry wait the task asks again
    await entered(world, "request_slot")
    other = SlotRequest(workflow_id="another-task", task_id="t0")
    taken = await admission.ask_gate(env.client, GateInput(provider=api.PLATFORM_GATE, limit=1), platform.id,
                                     queue, other)
    world.release("request_slot")
    await waiting_in_line(env, platform)

    stale = SlotGrant(token=taken.token - 1, gate=api.PLATFORM_GATE)  # the slot attempt 1 ran under, again
    await handle.signal(api.SIGNAL_PLATFORM_SLOT_GRANTED, stale)
    await env.sleep(600)
    assert len(world.called("submit")) == 1 and world.status is S.QUEUED
    assert await platform.query(api.QUERY_GATE_HOLDERS, result_type=list[str]) == ["another-task"]

    await platform.signal(api.SIGNAL_GATE_RELEASE, SlotRelease(workflow_id="another-task", token=taken.token))
    assert await ending(handle) == "completed"
    assert len(world.called("submit")) == 2 and world.balanced()
    assert (await snapshot(platform)).in_use == 0
