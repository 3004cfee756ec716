"""GenerationWorkflow's review branch (`review-v1`) on the time-skipping server: checks, REVIEW
with the credit settled, the `review` update (approve, reject, regenerate) and its refusals, the
review deadline, a cancel while in review, and sampling.

`REELQUEUE_RECORD_HISTORIES=1 pytest tests/workflow/test_review_paths.py` records each path's
history into tests/fixtures/histories/generation/review-v1/ for the replay test.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from workflow_fakes import (
    CHECKS_BLACK,
    JOB_COST,
    RUNNING,
    SUCCEEDED,
    World,
    accepted,
    ending,
    review_policy,
    until,
)

from contracts import workflow_api as api
from contracts.messages import ReviewAction, ReviewRequest, ReviewResult
from contracts.task import TaskStatus as S

HISTORY_FOLDER = "review-v1"
TO_REVIEW = ["VALIDATING", "QUOTA_RESERVED", "QUEUED", "DISPATCHING", "SUBMITTED", "RUNNING", "OUTPUT_FETCHING",
             "POST_PROCESSING", "REVIEW"]


async def review(handle: WorkflowHandle, action: ReviewAction, *, by: str = "alice", reason: str = "",
                 prompt: str | None = None) -> ReviewResult:
    return await handle.execute_update(api.UPDATE_REVIEW,
                                       ReviewRequest(action=action, by=by, reason=reason, prompt=prompt),
                                       result_type=ReviewResult)


async def refusal_of(handle: WorkflowHandle, action: ReviewAction, reason: str = "") -> str:
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await review(handle, action, reason=reason)
    return str(refused.value.cause)


async def in_review(env, world: World, run_world) -> WorkflowHandle:
    world.review = review_policy()
    handle = await run_world()
    await until(env, lambda: world.status is S.REVIEW)
    return handle


def decision_event(world: World, event: str) -> dict:
    return next(t.payload for t in world.transitions if t.event.value == event)


async def test_required_review_settles_then_waits_for_approval(env, world, run_world):
    handle = await in_review(env, world, run_world)
    assert world.moves() == TO_REVIEW
    assert world.sums() == {"RESERVE": 4, "SETTLE": 3, "RELEASE": 1}  # the provider already charged
    [checked] = world.checked()
    assert checked.proxy_asset_id == "p" and checked.attempt_no == 1
    assert "needs a reason" in await refusal_of(handle, ReviewAction.REJECT, "  ")
    result = await review(handle, ReviewAction.APPROVE)
    assert result.status is S.SUCCEEDED and "approve by alice" in result.message
    assert await ending(handle) == "completed"
    assert world.moves()[-1] == "SUCCEEDED"
    assert decision_event(world, "review_approved") == {"decision": "approve", "by": "alice", "reason": ""}
    assert world.sums() == {"RESERVE": 4, "SETTLE": 3, "RELEASE": 1}


async def test_a_decision_before_review_is_refused(env, world, run_world):
    world.review = review_policy()
    world.hold("make_media")
    handle = await run_world()
    await asyncio.wait_for(world.entered["make_media"].wait(), timeout=30)
    assert "not in REVIEW" in await refusal_of(handle, ReviewAction.APPROVE)
    world.release("make_media")
    await until(env, lambda: world.status is S.REVIEW)
    await review(handle, ReviewAction.APPROVE)
    assert await ending(handle) == "completed"


async def test_reject_with_reason(env, world, run_world):
    handle = await in_review(env, world, run_world)
    result = await review(handle, ReviewAction.REJECT, by="bob", reason="logo is cut off")
    assert result.status is S.REJECTED
    assert await ending(handle) == "completed"
    assert decision_event(world, "review_rejected") == {"decision": "reject", "by": "bob", "reason": "logo is cut off"}
    assert world.balanced() and world.held() == 0


async def test_regenerate_with_an_edited_prompt_is_a_new_paid_attempt(env, world, run_world):
    world.submits = [accepted("job-1"), accepted("job-2")]
    handle = await in_review(env, world, run_world)
    result = await review(handle, ReviewAction.REGENERATE, by="carol", prompt="Brighter light, slower zoom")
    assert result.status is S.QUEUED
    await until(env, lambda: world.status is S.REVIEW and len(world.checked()) == 2)
    regen = next(t for t in world.transitions if t.event.value == "review_regenerate")
    assert regen.prompt_override == "Brighter light, slower zoom" and regen.payload["by"] == "carol"
    assert [r.attempt_no for r in world.called("submit")] == [1, 2]
    # The first attempt was settled on entering REVIEW; the second is charged as its own ADJUSTMENT.
    assert world.sums() == {"RESERVE": 4, "SETTLE": 3, "RELEASE": 1, "ADJUSTMENT": Decimal(str(JOB_COST))}
    await review(handle, ReviewAction.APPROVE, by="carol")
    assert await ending(handle) == "completed"
    assert world.moves()[-1] == "SUCCEEDED" and world.balanced()


async def test_regenerate_after_a_long_review_gets_fresh_deadlines(env, world, run_world):
    """Hours in REVIEW must not expire the regenerated attempt's job (its deadlines start anew)."""
    world.submits = [accepted("job-1"), accepted("job-2")]
    world.polls = [RUNNING, SUCCEEDED, RUNNING, SUCCEEDED]
    world.review = review_policy(deadline_s=48 * 3600)
    handle = await run_world()
    await until(env, lambda: world.status is S.REVIEW)
    await env.sleep(30 * 3600)  # past the job deadline (1 h) and the task deadline (24 h) of the first run
    await review(handle, ReviewAction.REGENERATE, prompt="Closer framing")
    await until(env, lambda: world.status is S.REVIEW and len(world.checked()) == 2)
    assert world.called("cancel_job") == [] and "EXPIRED" not in world.moves()
    await review(handle, ReviewAction.APPROVE)
    assert await ending(handle) == "completed"


async def test_regenerate_is_refused_when_no_paid_attempt_is_left(env, world, run_world):
    world.submits = [accepted("job-1"), accepted("job-2"), accepted("job-3")]
    handle = await in_review(env, world, run_world)
    for n in (2, 3):
        await review(handle, ReviewAction.REGENERATE)
        await until(env, lambda n=n: world.status is S.REVIEW and len(world.checked()) == n)
    assert "no paid attempt left" in await refusal_of(handle, ReviewAction.REGENERATE)
    await review(handle, ReviewAction.REJECT, reason="still wrong after 3 attempts")
    assert await ending(handle) == "completed" and world.status is S.REJECTED
    assert world.sums()["ADJUSTMENT"] == Decimal(str(2 * JOB_COST))


@pytest.mark.parametrize(("on_deadline", "closes", "status"), [("expire", "failed:EXPIRED", S.EXPIRED),
                                                                 ("approve", "completed", S.SUCCEEDED)])
async def test_review_deadline(world, run_world, on_deadline, closes, status):
    world.review = review_policy(on_deadline=on_deadline, deadline_s=3 * 3600)
    handle = await run_world()
    assert await ending(handle) == closes
    assert world.status is status and "REVIEW" in world.moves()
    if on_deadline == "approve":
        assert decision_event(world, "review_approved")["by"] == "review-deadline"
    assert world.balanced()


@pytest.mark.histories("review-decision-wins-v1")
@pytest.mark.worker_restarts
@pytest.mark.parametrize("single_batch", [False, True], ids=["handlers-first", "single-batch"])
async def test_a_decision_that_lands_with_the_review_deadline_wins(own_env, world, run_world, single_batch):
    """The deadline's timer and the reviewer's update in one activation: the decision was accepted,
    so it is carried out, the reviewer's call returns and the workflow closes. With single-batch
    activations the timer wakes the wait before the handler's decision is looked at."""
    env = own_env
    handle = await in_review(env, world, run_world)
    fires_at = await review_deadline(handle)
    await env.sleep((fires_at - await env.get_current_time()).total_seconds() - 5)
    async with run_world.worker_stopped(single_batch=single_batch):  # both reach the workflow when it is back
        await env.sleep(6)  # the deadline's timer fires; no worker sees it (the clock stops there)
        decision = asyncio.create_task(review(handle, ReviewAction.APPROVE, reason="looks right"))
        await asyncio.sleep(2)  # the update waits at the server
    result = await asyncio.wait_for(decision, timeout=30)
    assert result.status is S.SUCCEEDED and await ending(handle) == "completed"
    assert decision_event(world, "review_approved")["by"] == "alice" and world.balanced()


async def review_deadline(handle: WorkflowHandle) -> datetime:
    """When the review deadline's timer (the workflow's latest) fires."""
    timers = [e async for e in handle.fetch_history_events() if e.HasField("timer_started_event_attributes")]
    started = timers[-1]
    timeout = started.timer_started_event_attributes.start_to_fire_timeout
    return started.event_time.ToDatetime(UTC) + timeout.ToTimedelta()


async def test_cancel_in_review(env, world, run_world):
    handle = await in_review(env, world, run_world)
    await handle.signal(api.SIGNAL_CANCEL, {"reason": "campaign stopped", "requested_by": "dave"})
    assert await ending(handle) == "completed"
    assert world.moves()[-2:] == ["CANCEL_REQUESTED", "CANCELED"] and world.balanced()


async def test_sample_not_drawn_and_checks_pass_needs_no_review(world, run_world):
    world.review = review_policy(required=False)
    assert await ending(await run_world()) == "completed"
    assert "REVIEW" not in world.moves() and len(world.checked()) == 1


async def test_failed_checks_send_an_undrawn_task_to_review(env, world, run_world):
    world.review = review_policy(required=False)
    world.checks = [CHECKS_BLACK]
    handle = await run_world()
    await until(env, lambda: world.status is S.REVIEW)
    review_event = next(t for t in world.transitions if t.event.value == "review_required")
    assert review_event.payload["failed_checks"] == ["black"] and review_event.payload["checks_passed"] is False
    await review(handle, ReviewAction.REJECT, reason="black video")
    assert await ending(handle) == "completed" and world.status is S.REJECTED


async def test_no_review_runs_no_checks(world, run_world):
    assert await ending(await run_world()) == "completed"
    assert world.checked() == [] and "REVIEW" not in world.moves()
