"""GenerationWorkflow's checks gate (`checks-gate-success-v1`) on the time-skipping server: a template
without review succeeds only with its proxy's automatic checks passed; a failed check regenerates once
within the paid-attempt budget, then REVIEW, or FAILED_FINAL naming the check when the plan says so.

`REELQUEUE_RECORD_HISTORIES=1 pytest tests/workflow/test_checks_gate.py` records each path's history
into tests/fixtures/histories/generation/checks-gate-success-v1/ for the replay test.
"""

from __future__ import annotations

from decimal import Decimal

from temporalio.exceptions import ApplicationError
from workflow_fakes import (
    CHECKS_BLACK,
    CHECKS_PASSED,
    JOB_COST,
    RESERVED,
    RUNNING,
    SUCCEEDED,
    accepted,
    checks_policy,
    ending,
    job,
    until,
)

from activities.errors import INSUFFICIENT_CREDIT
from contracts.messages import CheckOutcome, CheckResult
from contracts.provider import ErrorClass, JobStatus
from contracts.task import TaskStatus as S

HISTORY_FOLDER = "checks-gate-success-v1"
TO_CHECKS = ["VALIDATING", "QUOTA_RESERVED", "QUEUED", "DISPATCHING", "SUBMITTED", "RUNNING", "OUTPUT_FETCHING",
             "POST_PROCESSING"]
REGENERATED = [*TO_CHECKS, "QUEUED", "DISPATCHING", "SUBMITTED", "RUNNING", "OUTPUT_FETCHING", "POST_PROCESSING"]
CHECKS_FROZEN = CheckResult(passed=False, checks=[
    CheckOutcome(name="black", passed=True, detail="0.00 s black"),
    CheckOutcome(name="frozen", passed=False, detail="1.80 s frozen")])
TWO_JOBS = Decimal(str(2 * JOB_COST))
FAILED_JOB = job(JobStatus.FAILED, cost=0.0, error_class=ErrorClass.RETRYABLE, error="render failed")


def two_jobs(world, checks: list[CheckResult], on_failed_checks: str = "review") -> None:
    """A template without review whose provider succeeds twice; the checks answer `checks` in turn."""
    world.checks_policy = checks_policy(on_failed_checks=on_failed_checks)
    world.submits = [accepted("job-1"), accepted("job-2")]
    world.polls = [RUNNING, SUCCEEDED, RUNNING, SUCCEEDED]
    world.checks = checks


def payload(world, event: str) -> dict:
    return next(t.payload for t in world.transitions if t.event.value == event)


async def test_a_black_video_without_review_never_succeeds_silently(env, world, run_world):
    """The defect: with review off, a video that fails its automatic checks ended SUCCEEDED."""
    two_jobs(world, [CHECKS_BLACK])
    handle = await run_world()
    await until(env, lambda: world.status is S.REVIEW)
    assert world.status is not S.SUCCEEDED
    await handle.cancel()
    assert await ending(handle) == "canceled"


async def test_checks_passed_succeed(env, world, run_world):
    world.checks_policy = checks_policy()
    handle = await run_world()
    assert await ending(handle) == "completed"
    assert world.moves() == [*TO_CHECKS, "SUCCEEDED"]
    [checked] = world.checked()
    assert checked.attempt_no == 1 and checked.policy.audio_expected is False
    assert world.sums() == {"RESERVE": RESERVED, "SETTLE": Decimal(str(JOB_COST)),
                            "RELEASE": RESERVED - Decimal(str(JOB_COST))}


async def test_a_failed_check_regenerates_once_then_succeeds(env, world, run_world):
    two_jobs(world, [CHECKS_BLACK, CHECKS_PASSED])
    handle = await run_world()
    assert await ending(handle) == "completed"
    assert world.moves() == [*REGENERATED, "SUCCEEDED"]
    assert [r.attempt_no for r in world.called("submit")] == [1, 2]
    assert payload(world, "checks_failed")["failed_checks"] == ["black"]
    # Both jobs were paid: the regeneration's estimate was held before its submit, both holds settled.
    # (the task's own hold is the prepare step's, lean-path-v1)
    assert len(world.called("prepare_task")) == 1
    assert [r.hold_for_attempt for r in world.called("reserve_credit")] == [2]
    assert world.times("reserve_credit")[0] < world.times("submit")[1]
    assert world.sums() == {"RESERVE": 2 * RESERVED, "SETTLE": TWO_JOBS, "RELEASE": 2 * RESERVED - TWO_JOBS}
    assert world.balanced()


async def test_checks_failed_twice_go_to_review(env, world, run_world):
    two_jobs(world, [CHECKS_BLACK, CHECKS_FROZEN])
    handle = await run_world()
    await until(env, lambda: world.status is S.REVIEW)
    assert world.moves() == [*REGENERATED, "REVIEW"]
    review = payload(world, "review_required")
    assert review["checks_passed"] is False and review["failed_checks"] == ["frozen"]
    assert len(world.called("submit")) == 2  # regenerated once, not again
    assert world.sums() == {"RESERVE": 2 * RESERVED, "SETTLE": TWO_JOBS, "RELEASE": 2 * RESERVED - TWO_JOBS}
    assert world.balanced()
    await handle.cancel()
    assert await ending(handle) == "canceled"


async def test_failed_checks_fail_the_task_when_the_plan_says_so(env, world, run_world):
    two_jobs(world, [CHECKS_BLACK, CHECKS_FROZEN], on_failed_checks="fail")
    handle = await run_world()
    assert await ending(handle) == "failed:FAILED_FINAL"
    assert world.moves() == [*REGENERATED, "FAILED_FINAL"]
    final = world.transitions[-1]
    assert final.error_class == "checks" and "frozen (1.80 s frozen)" in final.error
    assert final.payload["failed_checks"] == ["frozen"]
    assert world.sums() == {"RESERVE": 2 * RESERVED, "SETTLE": TWO_JOBS, "RELEASE": 2 * RESERVED - TWO_JOBS}


async def test_no_paid_attempt_left_goes_to_review_without_regenerating(env, world, run_world):
    world.checks_policy = checks_policy()
    world.submits = [accepted("job-1"), accepted("job-2"), accepted("job-3")]
    world.polls = [RUNNING, FAILED_JOB, RUNNING, FAILED_JOB, RUNNING, SUCCEEDED]
    world.checks = [CHECKS_BLACK]
    handle = await run_world()
    await until(env, lambda: world.status is S.REVIEW)
    assert len(world.called("submit")) == 3 and not any(t.event.value == "checks_failed" for t in world.transitions)
    await handle.cancel()
    assert await ending(handle) == "canceled"


async def test_no_credit_for_the_regeneration_goes_to_review_without_regenerating(env, world, run_world):
    two_jobs(world, [CHECKS_BLACK])
    world.reserves = [None, ApplicationError("tenant has 1 credit", type=INSUFFICIENT_CREDIT, non_retryable=True)]
    handle = await run_world()
    await until(env, lambda: world.status is S.REVIEW)
    assert world.moves() == [*TO_CHECKS, "REVIEW"] and len(world.called("submit")) == 1
    assert world.sums() == {"RESERVE": RESERVED, "SETTLE": Decimal(str(JOB_COST)),
                            "RELEASE": RESERVED - Decimal(str(JOB_COST))}
    await handle.cancel()
    assert await ending(handle) == "canceled"
