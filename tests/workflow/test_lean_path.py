"""lean-path-v1 on the time-skipping server: the prepare step (validation, the credit hold and the moves to
QUEUED) and the media step (proxy, renditions, checks and, when nothing waits, the settle and the ending),
each branch of both. The straight run and the run without credit are in test_orchestration_cost.py.

`REELQUEUE_RECORD_HISTORIES=1` records each path into tests/fixtures/histories/generation/lean-path-v1/.
"""

from __future__ import annotations

import asyncio

import pytest
from workflow_fakes import (
    TASK_ID,
    ending,
    review_policy,
    until,
)

from contracts import workflow_api as api
from contracts.messages import CancelRequest, CheckOutcome, CheckResult, StrayJobRef
from contracts.task import TaskStatus as S
from workflows.generation.patches import LEAN_PATH

pytestmark = pytest.mark.histories(LEAN_PATH)

CHECKS_FAILED = CheckResult(passed=False, checks=[CheckOutcome(name="black", passed=False, detail="black 90%")])


async def test_an_invalid_task_ends_in_the_prepare_step_holding_nothing(world, run_world):
    world.valid = False
    assert await ending(await run_world()) == "failed:INVALID"
    assert world.moves() == ["VALIDATING", "INVALID"] and world.ledger == []
    assert len(world.called("prepare_task")) == 1 and not world.called("request_slot")


async def test_a_task_that_ended_before_its_run_is_found_by_the_prepare_step(world, run_world):
    world.status = S.CANCELED  # `reelqueue cancel` before the workflow started
    assert await ending(await run_world()) == "completed"
    assert world.moves() == [] and world.ledger == [] and not world.called("request_slot")


async def test_the_media_step_ends_a_task_without_review(world, run_world):
    """Settled and SUCCEEDED in the media step's last transaction: no settle or strays read of its own."""
    assert await ending(await run_world()) == "completed"
    [media] = world.called("make_media")
    assert media.close is not None and media.checks is None
    assert not world.called("settle") and not world.called("unaccounted_strays")
    assert world.status is S.SUCCEEDED and world.balanced()


async def test_an_open_stray_leaves_the_close_to_the_workflow(world, run_world):
    """A duplicate job recorded while the task ran (a late submit answer): the step does not settle, the
    workflow accounts the stray, then settles and ends the task."""
    world.strays = [StrayJobRef(task_id=TASK_ID, attempt_no=1, job_id="late-job")]
    assert await ending(await run_world()) == "completed"
    assert [s.job_id for s in world.called("account_stray_job")] == ["late-job"]
    assert len(world.called("settle")) == 1 and world.status is S.SUCCEEDED
    assert world.sums() == {"RESERVE": 4, "SETTLE": 3, "RELEASE": 1, "ADJUSTMENT": 1}


async def test_failed_checks_leave_the_close_to_the_review(env, world, run_world):
    """A sampled-out review whose checks fail: the step made them and does not close; the task goes to
    REVIEW with those checks (no check step of its own)."""
    world.review = review_policy(required=False)
    world.checks = [CHECKS_FAILED]
    handle = await run_world()
    await until(env, lambda: world.status is S.REVIEW)
    assert len(world.called("make_media")) == 1 and not world.called("check_output")
    assert world.sums() == {"RESERVE": 4, "SETTLE": 3, "RELEASE": 1}  # settled on entering REVIEW
    await handle.cancel()
    assert await ending(handle) == "canceled"


async def test_a_required_review_is_not_closed_by_the_media_step(env, world, run_world):
    world.review = review_policy()
    handle = await run_world()
    await until(env, lambda: world.status is S.REVIEW)
    [media] = world.called("make_media")
    assert media.close is None and media.checks is not None
    await handle.cancel()
    assert await ending(handle) == "canceled"


async def test_a_cancel_during_the_media_step_is_too_late(world, run_world):
    """The video is paid for: the step closes the task it was asked to close; the cancel changes nothing."""
    world.hold("make_media")
    handle = await run_world()
    await asyncio.wait_for(world.entered["make_media"].wait(), timeout=30)
    await handle.signal(api.SIGNAL_CANCEL, CancelRequest(reason="campaign stopped", requested_by="dave"))
    world.release("make_media")
    assert await ending(handle) == "completed"
    assert world.status is S.SUCCEEDED and world.balanced() and not world.called("cancel_job")


async def test_a_revalidated_task_is_prepared_from_validating(world, run_world):
    """`retry --status INVALID` moved the task back to VALIDATING itself: the run's validation_started is
    refused there, and the step goes on to hold and queue it."""
    world.status = S.VALIDATING
    assert await ending(await run_world()) == "completed"
    assert world.moves() == ["QUOTA_RESERVED", "QUEUED", "DISPATCHING", "SUBMITTED", "RUNNING", "OUTPUT_FETCHING",
                             "POST_PROCESSING", "SUCCEEDED"] and world.balanced()
