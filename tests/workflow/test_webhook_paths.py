"""GenerationWorkflow with provider webhooks, on the time-skipping server with fake activities.

Webhook observations and status calls go through one reducer: a signed, non-final observation
moves the task without a status call, an ending is confirmed by one, the same event twice or an
older one changes nothing, and with every webhook lost the safety-net polling still ends the task.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from workflow_fakes import RUNNING, SUCCEEDED, accepted, ending, until, webhook

from contracts import workflow_api as api
from contracts.provider import JobStatus
from workflows.observations import SAFETY_NET_FIRST_S

HISTORY_FOLDER = "safety-net-60s"  # the safety net's 60-s first wait (earlier folders hold the 30-s one)
MAIN_LINE = ["VALIDATING", "QUOTA_RESERVED", "QUEUED", "DISPATCHING", "SUBMITTED", "RUNNING",
             "OUTPUT_FETCHING", "POST_PROCESSING", "SUCCEEDED"]


async def _following(env, world, run_world):
    """Start the task and return its handle once its job is accepted and being followed."""
    handle = await run_world()
    await until(env, lambda: "SUBMITTED" in world.moves(), step_s=0.1)
    return handle


async def test_signed_webhooks_drive_the_task_with_one_status_call(env, world, run_world):
    world.submits = [accepted("job-1", webhooks=True)]
    world.polls = [SUCCEEDED]  # the only status call: confirming the ending (it brings the cost)
    handle = await _following(env, world, run_world)
    await handle.signal(api.SIGNAL_PROVIDER_UPDATE, webhook(JobStatus.RUNNING, "e2", at_s=2))
    await handle.signal(api.SIGNAL_PROVIDER_UPDATE, webhook(JobStatus.RUNNING, "e2", at_s=2))  # sent twice
    await handle.signal(api.SIGNAL_PROVIDER_UPDATE, webhook(JobStatus.QUEUED, "e1", at_s=1))  # came late
    await until(env, lambda: "RUNNING" in world.moves(), step_s=0.1)
    await handle.signal(api.SIGNAL_PROVIDER_UPDATE, webhook(JobStatus.SUCCEEDED, "e3", at_s=3))
    assert await ending(handle) == "completed"
    assert world.moves() == MAIN_LINE  # RUNNING once, never back to an earlier status
    assert len(world.called("poll_job")) == 1
    assert world.sums() == {"RESERVE": 4, "SETTLE": 3, "RELEASE": 1}


async def test_every_webhook_lost_the_safety_net_polls_to_the_end(world, run_world):
    world.submits = [accepted("job-1", webhooks=True)]
    world.polls = [RUNNING, SUCCEEDED]
    assert await ending(await run_world()) == "completed"
    assert world.moves() == MAIN_LINE
    submitted, first_poll = world.times("submit")[0], world.times("poll_job")[0]
    assert first_poll - submitted >= timedelta(seconds=SAFETY_NET_FIRST_S * 0.8)  # not the 1-s cadence


async def test_an_ending_that_came_before_the_submit_answer_is_confirmed_at_once(world, run_world):
    early = webhook(JobStatus.SUCCEEDED, "e9", at_s=1)  # an orphan matched when the job id was saved
    world.submits = [accepted("job-1", webhooks=True, early=(early,))]
    world.polls = [SUCCEEDED]
    assert await ending(await run_world()) == "completed"
    assert world.moves() == [m for m in MAIN_LINE if m != "RUNNING"]  # from SUBMITTED straight to the output
    submitted, polled = world.times("submit")[0], world.times("poll_job")[0]
    assert polled - submitted < timedelta(seconds=5) and len(world.called("poll_job")) == 1


async def test_an_unsigned_webhook_is_only_a_hint_to_ask(env, world, run_world):
    world.submits = [accepted("job-1", webhooks=True)]
    world.polls = [RUNNING, SUCCEEDED]
    handle = await _following(env, world, run_world)
    await handle.signal(api.SIGNAL_PROVIDER_UPDATE, webhook(JobStatus.SUCCEEDED, "u1", verified=False))
    await until(env, lambda: len(world.called("poll_job")) == 1, step_s=0.1)
    assert "OUTPUT_FETCHING" not in world.moves()  # the provider's status call said running: not done
    assert await ending(handle) == "completed"
    assert world.moves() == MAIN_LINE and len(world.called("poll_job")) == 2



@pytest.mark.histories("webhook-wake-v1")
async def test_an_ending_that_comes_during_a_status_call_is_acted_on_at_once(env, world, run_world):
    """A webhook landing while a step runs is in the inbox when the step ends: the task confirms it
    then, not at the safety net's next call (120 s later here)."""
    world.submits = [accepted("job-1", webhooks=True)]
    world.polls = [RUNNING, SUCCEEDED]
    world.hold("poll_job")
    handle = await _following(env, world, run_world)
    await until(env, lambda: world.entered["poll_job"].is_set(), step_s=1.0)  # the safety net's first call
    await handle.signal(api.SIGNAL_PROVIDER_UPDATE, webhook(JobStatus.SUCCEEDED, "e1", at_s=1))
    world.release("poll_job")  # it answers RUNNING: the webhook came after the provider's answer
    assert await ending(handle) == "completed"
    first, second = world.times("poll_job")
    assert second - first < timedelta(seconds=5)  # the floor between calls, not the safety net's interval
