"""Duplicate provider jobs (strays) on the time-skipping server: every one the database holds is
accounted before the task's ledger closes, and one the provider refuses to answer for waits for a
person (NEEDS_ATTENTION, stuck "stray") instead of failing the workflow; the task then ends as it
was going to, its video kept. Histories go to tests/fixtures/histories/generation/strays-v1/.
"""

from __future__ import annotations

import asyncio

import pytest
from workflow_fakes import TASK_ID, World, ending, refusal, resolve, review_policy, unknown, until

from contracts import workflow_api as api
from contracts.messages import (
    ReconcileOutcome,
    ReconcileResult,
    ResolveAction,
    ReviewAction,
    ReviewRequest,
    ReviewResult,
    StrayJobRef,
    StrayJobResult,
)
from contracts.provider import JobStatus
from contracts.task import TaskStatus as S

HISTORY_FOLDER = "strays-v1"
STRAY_COST = StrayJobResult(status=JobStatus.CANCELED, cost=1.0)


def duplicate(world: World, job_id: str = "job-1b") -> None:
    """An unknown submit whose reconcile finds job-1 and a duplicate, kept in stray_jobs as the
    real reconcile does."""
    world.submits = [unknown()]
    world.reconciles = [ReconcileResult(outcome=ReconcileOutcome.FOUND, job_id="job-1", duplicates=[job_id])]
    world.strays = [StrayJobRef(task_id=TASK_ID, attempt_no=1, job_id=job_id)]


def attention_payloads(world: World) -> list[dict]:
    return [t.payload for t in world.transitions if t.event.value == "needs_attention"]


async def test_a_late_answer_stray_is_accounted_before_the_ledger_closes(world, run_world):
    """A submit answer that came after its attempt was concluded left a stray only in the database:
    the workflow never saw it, and still cancels and costs it before settling."""
    world.strays = [StrayJobRef(task_id=TASK_ID, attempt_no=1, job_id="late-job")]
    assert await ending(await run_world()) == "completed"
    assert [r.job_id for r in world.called("account_stray_job")] == ["late-job"]
    names = [n for n, _ in world.calls]
    assert names.index("account_stray_job") < names.index("settle")
    assert world.status is S.SUCCEEDED and world.strays == []
    assert world.sums() == {"RESERVE": 4, "SETTLE": 3, "RELEASE": 1, "ADJUSTMENT": 1}


async def test_a_stray_the_workflow_found_is_accounted_once(world, run_world):
    duplicate(world)
    assert await ending(await run_world()) == "completed"
    assert [r.job_id for r in world.called("account_stray_job")] == ["job-1b"]
    assert world.sums() == {"RESERVE": 4, "SETTLE": 3, "RELEASE": 1, "ADJUSTMENT": 1}


@pytest.mark.parametrize(("action", "adjusted"), [(ResolveAction.RETRY, 1), (ResolveAction.ACCEPT_DUPLICATE_RISK, 4)])
async def test_a_refused_stray_waits_for_a_person_and_the_video_is_kept(env, world, run_world, action, adjusted):
    """The provider refuses to answer for the duplicate (a 4xx on its cancel): NEEDS_ATTENTION with
    the evidence and the reservation held; after the decision (ask again, or book the task's
    estimate as the duplicate's unknown cost) the task ends SUCCEEDED with its video."""
    duplicate(world)
    world.stray_answers = [refusal("404 no such job"), STRAY_COST]
    handle = await run_world()
    await until(env, lambda: world.status is S.NEEDS_ATTENTION)
    (payload,) = attention_payloads(world)
    assert payload["stuck"] == "stray" and payload["strays"] == ["job-1b"] and "404" in payload["evidence"]
    assert world.held() == 4 and not world.called("settle")
    result = await resolve(handle, action, "checked the provider's dashboard")
    assert result.status is not S.NEEDS_ATTENTION
    assert await ending(handle) == "completed"
    assert world.status is S.SUCCEEDED
    assert world.moves()[-3:] == ["NEEDS_ATTENTION", "POST_PROCESSING", "SUCCEEDED"]
    assert world.sums() == {"RESERVE": 4, "SETTLE": 3, "RELEASE": 1, "ADJUSTMENT": adjusted}
    assert world.strays == []


async def test_a_stray_refused_again_asks_again(env, world, run_world):
    duplicate(world)
    world.stray_answers = [refusal("401 bad key"), refusal("401 bad key"), STRAY_COST]
    handle = await run_world()
    await until(env, lambda: world.status is S.NEEDS_ATTENTION)
    await resolve(handle, ResolveAction.RETRY)
    await until(env, lambda: len(attention_payloads(world)) == 2 and world.status is S.NEEDS_ATTENTION)
    await resolve(handle, ResolveAction.RETRY)
    assert await ending(handle) == "completed"
    assert len(world.called("account_stray_job")) == 3
    assert world.sums() == {"RESERVE": 4, "SETTLE": 3, "RELEASE": 1, "ADJUSTMENT": 1}


async def test_a_refused_stray_failed_by_a_person_still_balances(env, world, run_world):
    duplicate(world)
    world.stray_answers = [refusal()]
    handle = await run_world()
    await until(env, lambda: world.status is S.NEEDS_ATTENTION)
    await resolve(handle, ResolveAction.FAIL, "provider support will refund it")
    assert await ending(handle) == "failed:FAILED_FINAL"
    assert [d.stray.job_id for d in world.called("accept_stray_cost")] == ["job-1b"]
    assert world.balanced() and world.sums() == {"RESERVE": 4, "SETTLE": 3, "RELEASE": 1, "ADJUSTMENT": 4}


async def test_a_refused_stray_on_a_cancel_ends_canceled(env, world, run_world):
    duplicate(world)
    world.stray_answers = [refusal()]
    world.polls = [world.polls[0]]  # RUNNING until cancelled
    handle = await run_world()
    await until(env, lambda: world.status is S.RUNNING)
    # The cancel lands while a status call is in flight, not on a poll timer about to fire: the
    # time-skipping server refuses a workflow task that cancels a timer which fired meanwhile
    # ("invalid history builder state for action") and its clock stalls for good (a real server
    # tells the worker to retry). The held call starts once the poll timer fires in real time.
    world.hold("poll_job")
    world.entered["poll_job"].clear()
    await asyncio.wait_for(world.entered["poll_job"].wait(), timeout=60)
    await handle.signal(api.SIGNAL_CANCEL, {"reason": "test", "requested_by": "test"})
    world.release("poll_job")
    await until(env, lambda: world.status is S.NEEDS_ATTENTION)
    await resolve(handle, ResolveAction.ACCEPT_DUPLICATE_RISK)
    assert await ending(handle) == "completed"
    assert world.status is S.CANCELED
    assert world.moves()[-3:] == ["NEEDS_ATTENTION", "CANCEL_REQUESTED", "CANCELED"]
    assert world.balanced() and world.sums() == {"RESERVE": 4, "RELEASE": 4, "ADJUSTMENT": 4}


async def test_a_refused_stray_before_review_returns_to_review(env, world, run_world):
    """Entering REVIEW closes the reservation, so strays are accounted there: after the decision
    the task goes back to its output and on to REVIEW, where the reviewer decides as usual."""
    duplicate(world)
    world.review = review_policy()
    world.stray_answers = [refusal()]
    handle = await run_world()
    await until(env, lambda: world.status is S.NEEDS_ATTENTION)
    await resolve(handle, ResolveAction.ACCEPT_DUPLICATE_RISK, "provider says it never ran")
    await until(env, lambda: world.status is S.REVIEW)
    await handle.execute_update(api.UPDATE_REVIEW, ReviewRequest(action=ReviewAction.APPROVE, by="alice"),
                                result_type=ReviewResult)
    assert await ending(handle) == "completed"
    assert world.moves()[-4:] == ["NEEDS_ATTENTION", "POST_PROCESSING", "REVIEW", "SUCCEEDED"]
    assert world.sums() == {"RESERVE": 4, "SETTLE": 3, "RELEASE": 1, "ADJUSTMENT": 4}


async def test_a_refused_stray_of_a_task_ended_outside_is_booked_by_the_workflow(env, world, run_world):
    """Someone else ended the task (nobody to ask through it): the workflow books the duplicate at
    the estimate itself, the refusal in the note, and closes; nothing is left unaccounted."""
    duplicate(world)
    world.stray_answers = [refusal("403 not your job")]
    world.polls = [world.polls[0]]  # RUNNING
    world.hold("poll_job")
    handle = await run_world()
    await until(env, lambda: bool(world.called("poll_job")))
    world.status = S.CANCELED  # an operator ended the task in Postgres
    world.release("poll_job")
    assert await ending(handle) == "completed"
    (accepted,) = world.called("accept_stray_cost")
    assert accepted.by == "workflow" and "403 not your job" in accepted.reason
    assert world.strays == [] and world.sums() == {"RESERVE": 4, "RELEASE": 4, "ADJUSTMENT": 4}


async def test_a_refused_stray_found_after_review_is_booked_by_the_workflow(env, world, run_world):
    """Entering REVIEW closed the reservation and a video never goes back out of REVIEW: a stray
    first seen at the reviewer's decision, and refused, is booked at the estimate by the workflow."""
    world.review = review_policy()
    world.stray_answers = [refusal("410 gone")]
    handle = await run_world()
    await until(env, lambda: world.status is S.REVIEW)
    world.strays = [StrayJobRef(task_id=TASK_ID, attempt_no=1, job_id="late-job")]  # a late answer, recorded now
    await handle.execute_update(api.UPDATE_REVIEW, ReviewRequest(action=ReviewAction.APPROVE, by="alice"),
                                result_type=ReviewResult)
    assert await ending(handle) == "completed"
    assert world.status is S.SUCCEEDED and "NEEDS_ATTENTION" not in world.moves()
    (accepted,) = world.called("accept_stray_cost")
    assert accepted.by == "workflow" and "410 gone" in accepted.reason
    assert world.sums() == {"RESERVE": 4, "SETTLE": 3, "RELEASE": 1, "ADJUSTMENT": 4}
