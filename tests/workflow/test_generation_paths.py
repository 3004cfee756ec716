"""Every branch of GenerationWorkflow on the time-skipping server, with fake activities under the
real names and the real state machine. Each test says where the task ends, which activities ran
(a `cancel_job` for every created job that did not finish) and what the ledger holds.

`REELQUEUE_RECORD_HISTORIES=1 pytest tests/workflow` records each path's history into
tests/fixtures/histories/generation/<patch>/ for the replay test.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from decimal import Decimal

import pytest
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from workflow_fakes import (
    CANCELED,
    RUNNING,
    SUCCEEDED,
    TASK_ID,
    World,
    accepted,
    ending,
    job,
    outage,
    refusal,
    refused,
    resolve,
    unknown,
    until,
)

from contracts import workflow_api as api
from contracts.admission import PlanLimits
from contracts.messages import PollResult, ReconcileOutcome, ReconcileResult, ResolveAction
from contracts.provider import ErrorClass, JobStatus
from contracts.task import TaskStatus as S

FOUND = ReconcileResult(outcome=ReconcileOutcome.FOUND, job_id="job-1")
ABSENT = ReconcileResult(outcome=ReconcileOutcome.ABSENT, evidence="no job for t1-a1")
NOT_ASKABLE = ReconcileResult(outcome=ReconcileOutcome.NOT_ASKABLE, evidence="provider has no lookup")


async def entered(world: World, name: str) -> None:
    await asyncio.wait_for(world.entered[name].wait(), timeout=30)


def cancelled_jobs(world: World) -> list[str]:
    return [ref.job_id for ref in world.called("cancel_job")]


async def cancel(handle: WorkflowHandle, how: str) -> None:
    if how == "signal":
        await handle.signal(api.SIGNAL_CANCEL, {"reason": "test", "requested_by": "test"})
    else:
        await handle.cancel(reason="test")


async def cancel_during(world: World, run_world, step: str, how: str) -> WorkflowHandle:
    """Start the task, hold `step` in flight, cancel meanwhile, then let the step finish."""
    world.hold(step)
    handle = await run_world()
    await entered(world, step)
    await cancel(handle, how)
    world.release(step)
    return handle


def closed_as_canceled(how: str) -> str:
    return "completed" if how == "signal" else "canceled"


async def refusal_of(handle: WorkflowHandle, action: ResolveAction, reason: str = "") -> str:
    """The validator's message when the workflow refuses an operator's decision."""
    with pytest.raises(WorkflowUpdateFailedError) as refused_update:
        await resolve(handle, action, reason)
    return str(refused_update.value.cause)


# -- the main line and its refusals ----------------------------------------------------------


async def test_validation_fails(world, run_world):
    world.valid = False
    assert await ending(await run_world()) == "failed:INVALID"
    assert world.status is S.INVALID
    assert not world.called("reserve_credit") and not world.called("submit")
    assert world.ledger == []


async def test_insufficient_credit(world, run_world):
    world.credit = False
    assert await ending(await run_world()) == "failed:FAILED_FINAL"
    assert world.status is S.FAILED_FINAL
    assert not world.called("submit")
    assert world.ledger == []


async def test_submit_accepted(world, run_world):
    assert await ending(await run_world()) == "completed"
    assert world.moves() == ["VALIDATING", "QUOTA_RESERVED", "QUEUED", "DISPATCHING", "SUBMITTED", "RUNNING",
                             "OUTPUT_FETCHING", "POST_PROCESSING", "SUCCEEDED"]
    assert len(world.called("submit")) == 1 and cancelled_jobs(world) == []
    assert world.sums() == {"RESERVE": 4, "SETTLE": 3, "RELEASE": 1}


async def test_the_plans_limits_travel_with_the_slot_request(world, run_world):
    world.plan_limits = PlanLimits(max_concurrent=7, submits_per_minute=120)
    assert await ending(await run_world()) == "completed"
    [ask] = world.called("request_slot")
    assert ask.plan_limits == world.plan_limits and ask.request.task_id == TASK_ID


async def test_unknown_then_found(world, run_world):
    world.submits, world.reconciles = [unknown()], [FOUND]
    assert await ending(await run_world()) == "completed"
    assert "SUBMIT_UNKNOWN" in world.moves() and world.status is S.SUCCEEDED
    assert len(world.called("submit")) == 1
    assert [r.job_id for r in world.called("poll_job")][0] == "job-1"
    assert world.balanced()


async def test_unknown_then_absent_submits_again(world, run_world):
    world.submits, world.reconciles = [unknown(), accepted("job-2")], [ABSENT]
    assert await ending(await run_world()) == "completed"
    assert [r.attempt_no for r in world.called("submit")] == [1, 2]
    assert world.moves()[4:7] == ["SUBMIT_UNKNOWN", "RETRY_WAIT", "QUEUED"]
    assert world.sums() == {"RESERVE": 4, "SETTLE": 3, "RELEASE": 1}


async def test_unknown_and_provider_cannot_be_asked(env, world, run_world):
    """Never an automatic second submit: a person decides, with the reservation held."""
    world.submits, world.reconciles = [unknown(), accepted("job-2")], [NOT_ASKABLE]
    handle = await run_world()
    await until(env, lambda: world.status is S.NEEDS_ATTENTION)
    assert len(world.called("submit")) == 1 and world.held() == 4
    assert "failing a task needs a reason" in await refusal_of(handle, ResolveAction.FAIL)
    result = await resolve(handle, ResolveAction.ACCEPT_DUPLICATE_RISK, "checked the provider's dashboard")
    assert result.status is not S.NEEDS_ATTENTION
    assert await ending(handle) == "completed"
    assert world.abandoned == [1] and [r.attempt_no for r in world.called("submit")] == [1, 2]
    decision = next(e for e in world.events if e[0] == "attention_resolved")
    assert decision[1] == "QUEUED"
    assert world.balanced()


async def test_rate_limited_then_succeeds(world, run_world):
    world.submits = [refused(retry_after_s=2.0), accepted("job-2")]
    assert await ending(await run_world()) == "completed"
    assert world.moves()[3:7] == ["DISPATCHING", "RETRY_WAIT", "QUEUED", "DISPATCHING"]
    assert world.status is S.SUCCEEDED and world.balanced()


async def test_job_failed_retryable_then_succeeds(world, run_world):
    world.submits = [accepted("job-1"), accepted("job-2")]
    world.polls = [job(JobStatus.FAILED, cost=0.0, error_class=ErrorClass.RETRYABLE, error="INTERNAL.GPU"),
                   RUNNING, SUCCEEDED]
    assert await ending(await run_world()) == "completed"
    assert [r.attempt_no for r in world.called("submit")] == [1, 2]
    assert cancelled_jobs(world) == []  # the failed job ended on its own
    assert world.sums() == {"RESERVE": 4, "SETTLE": 3, "RELEASE": 1}


async def test_moderation_ends_the_task(world, run_world):
    world.polls = [job(JobStatus.FAILED, cost=0.0, error_class=ErrorClass.MODERATION, error="SAFETY.INPUT")]
    assert await ending(await run_world()) == "failed:FAILED_FINAL"
    assert len(world.called("submit")) == 1
    assert world.sums() == {"RESERVE": 4, "RELEASE": 4}


async def test_paid_attempts_exhausted(world, run_world):
    world.submits = [accepted("job-1"), accepted("job-2"), accepted("job-3")]
    world.polls = [job(JobStatus.FAILED, cost=0.5, error_class=ErrorClass.RETRYABLE, error="INTERNAL")]
    assert await ending(await run_world()) == "failed:FAILED_FINAL"
    assert len(world.called("submit")) == 3
    assert world.sums() == {"RESERVE": 4, "SETTLE": Decimal("1.5"), "RELEASE": Decimal("2.5")}


# -- outages and deadlines -------------------------------------------------------------------


async def test_poll_outage_goes_to_attention_not_failure(env, world, run_world):
    """Scenario: the status API is down past the task's deadline. The job is never abandoned."""
    up = {"ok": False}
    world.deadline_s = 900
    world.polls = [RUNNING, lambda: SUCCEEDED if up["ok"] else outage()]
    handle = await run_world()
    await until(env, lambda: world.status is S.NEEDS_ATTENTION)
    assert world.held() == 4 and not world.called("settle") and cancelled_jobs(world) == []
    assert "applies to an unknown submit" in await refusal_of(handle, ResolveAction.ACCEPT_DUPLICATE_RISK)
    up["ok"] = True
    await resolve(handle, ResolveAction.RETRY, "status API is back")
    assert await ending(handle) == "completed"
    assert world.sums() == {"RESERVE": 4, "SETTLE": 3, "RELEASE": 1}


async def test_reconcile_outage_goes_to_attention_not_a_second_submit(env, world, run_world):
    world.submits, world.reconciles = [unknown()], [outage("list API down")]
    handle = await run_world()
    await until(env, lambda: world.status is S.NEEDS_ATTENTION)
    assert len(world.called("submit")) == 1 and world.held() == 4
    assert len(world.called("reconcile_submit")) == 40  # the whole budget, then a person
    await resolve(handle, ResolveAction.FAIL, "provider support confirmed no job")
    assert await ending(handle) == "failed:FAILED_FINAL"
    assert world.abandoned == [1] and world.sums() == {"RESERVE": 4, "RELEASE": 4}


@pytest.mark.histories("accepted-risk-ends-reconcile-v1")
async def test_accepting_the_duplicate_risk_after_a_reconcile_outage_submits_anew(env, world, run_world):
    """The operator accepts that the unknown submit may have made a job: its attempt is abandoned and
    still counts as paid; it is not reconciled again (that would call it absent and un-count it)."""
    world.submits, world.reconciles = [unknown(), accepted("job-2")], [outage("list API down")]
    world.polls = [SUCCEEDED]
    handle = await run_world()
    await until(env, lambda: world.status is S.NEEDS_ATTENTION)
    asked = len(world.called("reconcile_submit"))
    await resolve(handle, ResolveAction.ACCEPT_DUPLICATE_RISK, "support says at most one job")
    assert await ending(handle) == "completed"
    assert len(world.called("reconcile_submit")) == asked and len(world.called("submit")) == 2
    assert world.abandoned == [1]


async def test_provider_refuses_status_stops_retrying(env, world, run_world):
    """A non-retryable provider error is not retried 30 times; a person decides."""
    world.polls = [refusal()]
    handle = await run_world()
    await until(env, lambda: world.status is S.NEEDS_ATTENTION)
    assert len(world.called("poll_job")) == 1
    await resolve(handle, ResolveAction.FAIL, "job deleted at the provider")
    assert await ending(handle) == "failed:FAILED_FINAL"
    assert cancelled_jobs(world) == ["job-1"] and world.abandoned == [] and world.balanced()  # cancelled first


async def test_deadline_cancels_and_accounts_the_job(world, run_world):
    world.deadline_s = 60
    world.polls = [RUNNING]
    world.cancels = [job(JobStatus.CANCELED, cost=1.5)]
    assert await ending(await run_world()) == "failed:EXPIRED"
    assert cancelled_jobs(world) == ["job-1"]
    assert world.sums() == {"RESERVE": 4, "SETTLE": Decimal("1.5"), "RELEASE": Decimal("2.5")}


@pytest.mark.histories("job-deadline-v1")
async def test_a_long_retry_wait_leaves_the_next_job_its_whole_deadline(world, run_world):
    """The job deadline counts from the accepted submit: waiting (here a provider's Retry-After
    longer than the deadline) must not expire the job that follows."""
    world.deadline_s = 600
    world.submits = [refused(retry_after_s=900.0), accepted("job-2")]
    world.polls = [RUNNING, SUCCEEDED]
    assert await ending(await run_world()) == "completed"
    waited = world.times("submit")[1] - world.times("prepare_task")[0]
    assert waited.total_seconds() > world.deadline_s  # the job came after its old deadline had passed
    assert cancelled_jobs(world) == [] and world.status is S.SUCCEEDED


@pytest.mark.histories("job-deadline-v1")
async def test_an_earlier_attempt_does_not_shorten_the_next_jobs_deadline(world, run_world):
    """A first job that ran most of the deadline before failing leaves the second its own."""
    world.deadline_s = 60
    world.submits = [accepted("job-1"), accepted("job-2")]
    failed = job(JobStatus.FAILED, cost=0.0, error_class=ErrorClass.RETRYABLE, error="INTERNAL.GPU")
    world.polls = [runs_for(world, 50, {1: failed, 2: SUCCEEDED})]
    assert await ending(await run_world()) == "completed"
    assert world.times("poll_job")[-1] - world.times("prepare_task")[0] > timedelta(seconds=world.deadline_s)
    assert cancelled_jobs(world) == [] and [r.job_id for r in world.called("fetch_output")] == ["job-2"]


@pytest.mark.histories("job-deadline-v1")
async def test_a_job_found_late_by_reconcile_gets_its_whole_deadline(world, run_world):
    """An unknown submit whose reconcile took longer than the job deadline (provider errors retried):
    the job it found counts its deadline from then."""
    world.deadline_s = 60
    world.submits = [unknown()]
    world.reconciles = [outage()] * 6 + [FOUND]
    assert await ending(await run_world()) == "completed"
    found_after = world.times("poll_job")[0] - world.times("prepare_task")[0]
    assert found_after > timedelta(seconds=world.deadline_s) and cancelled_jobs(world) == []


def runs_for(world: World, seconds: float, endings: dict[int, PollResult]):
    """A poll answer: each attempt's job runs `seconds` after its submit, then ends as `endings` says."""
    def answer() -> PollResult:
        ref = world.called("poll_job")[-1]
        ran = world.times("poll_job")[-1] - world.times("submit")[ref.attempt_no - 1]
        return RUNNING if ran < timedelta(seconds=seconds) else endings[ref.attempt_no]
    return answer


# -- cancellation, by signal and from Temporal -----------------------------------------------


@pytest.mark.parametrize("how", ["signal", "temporal"])
async def test_cancel_in_queued(world, run_world, how):
    handle = await cancel_during(world, run_world, "prepare_task", how)
    assert await ending(handle) == closed_as_canceled(how)
    assert world.status is S.CANCELED and not world.called("submit")
    assert world.sums() == {"RESERVE": 4, "RELEASE": 4}  # the reserve committed during the cancel is released


@pytest.mark.parametrize("how", ["signal", "temporal"])
async def test_cancel_during_submit_cancels_that_job(world, run_world, how):
    handle = await cancel_during(world, run_world, "submit", how)
    assert await ending(handle) == closed_as_canceled(how)
    assert cancelled_jobs(world) == ["job-1"]
    assert world.moves()[-2:] == ["CANCEL_REQUESTED", "CANCELED"]
    assert world.sums() == {"RESERVE": 4, "RELEASE": 4}


@pytest.mark.parametrize("how", ["signal", "temporal"])
async def test_cancel_during_reconcile_cancels_the_found_job(world, run_world, how):
    world.submits, world.reconciles = [unknown()], [FOUND]
    handle = await cancel_during(world, run_world, "reconcile_submit", how)
    assert await ending(handle) == closed_as_canceled(how)
    assert cancelled_jobs(world) == ["job-1"] and len(world.called("submit")) == 1
    assert world.balanced()


@pytest.mark.parametrize("how", ["signal", "temporal"])
async def test_cancel_while_running(env, world, run_world, how):
    world.polls = [RUNNING]
    handle = await run_world()
    await until(env, lambda: world.status is S.RUNNING, step_s=0.5)
    await cancel(handle, how)
    assert await ending(handle) == closed_as_canceled(how)
    assert cancelled_jobs(world) == ["job-1"] and world.status is S.CANCELED
    assert world.sums() == {"RESERVE": 4, "RELEASE": 4}


@pytest.mark.parametrize("how", ["signal", "temporal"])
async def test_cancel_after_provider_succeeded_is_too_late(world, run_world, how):
    """Completion wins, and the cost is settled once (not once per observation)."""
    handle = await cancel_during(world, run_world, "fetch_output", how)
    assert await ending(handle) == "completed"
    assert world.status is S.SUCCEEDED and cancelled_jobs(world) == []
    assert world.sums() == {"RESERVE": 4, "SETTLE": 3, "RELEASE": 1}


async def test_cancel_succeeds_after_a_provider_outage(world, run_world):
    world.polls = [RUNNING]
    world.hold("poll_job")
    calls = {"n": 0}

    def flaky_cancel():
        calls["n"] += 1
        return CANCELED if calls["n"] > 8 else outage()

    world.cancels = [flaky_cancel]
    handle = await run_world()
    await entered(world, "poll_job")
    await cancel(handle, "temporal")
    world.release("poll_job")
    assert await ending(handle) == "canceled"
    assert len(world.called("cancel_job")) == 9 and world.status is S.CANCELED
    assert world.sums() == {"RESERVE": 4, "RELEASE": 4}


async def test_cancel_with_the_provider_down_holds_the_reservation(env, world, run_world):
    """Cleanup outlives the cancel's retry budget: NEEDS_ATTENTION, never a closed task with a live job."""
    up = {"ok": False}
    world.polls = [RUNNING]
    world.cancels = [lambda: CANCELED if up["ok"] else outage()]
    handle = await run_world()
    await until(env, lambda: world.status is S.RUNNING, step_s=0.5)
    await cancel(handle, "temporal")
    await until(env, lambda: world.status is S.NEEDS_ATTENTION)
    assert world.held() == 4 and not world.called("settle")
    up["ok"] = True
    await resolve(handle, ResolveAction.RETRY, "provider back")
    assert await ending(handle) == "canceled"
    assert world.status is S.CANCELED and world.sums() == {"RESERVE": 4, "RELEASE": 4}


# -- someone else changed the task -----------------------------------------------------------


async def test_task_cancelled_before_its_workflow_ran(world, run_world):
    world.status = S.CANCELED  # `reelqueue cancel` while `run` was still starting workflows
    assert await ending(await run_world()) == "completed"
    assert world.moves() == [] and not world.called("reserve_credit")  # prepare_task found it ended
    assert not world.called("submit") and world.ledger == []


async def test_task_changed_outside_while_the_job_runs(env, world, run_world):
    world.polls = [RUNNING]
    world.hold("poll_job")
    handle = await run_world()
    await entered(world, "poll_job")
    world.status = S.CANCELED  # an operator ended the task in Postgres
    world.release("poll_job")
    await ending(handle)
    assert cancelled_jobs(world) == ["job-1"]
    assert world.sums() == {"RESERVE": 4, "RELEASE": 4}


# -- duplicates and error classes ------------------------------------------------------------


async def test_duplicate_jobs_are_cancelled_and_costed(world, run_world):
    world.submits = [unknown()]
    world.reconciles = [ReconcileResult(outcome=ReconcileOutcome.FOUND, job_id="job-1", duplicates=["job-1b"])]
    assert await ending(await run_world()) == "completed"
    assert [r.job_id for r in world.called("account_stray_job")] == ["job-1b"]
    assert world.sums() == {"RESERVE": 4, "SETTLE": 3, "RELEASE": 1, "ADJUSTMENT": 1}


async def test_task_not_found_is_not_retried(world, run_world):
    world.valid = ApplicationError("task t1 not found", type="TaskNotFound", non_retryable=True)
    assert await ending(await run_world()) == "failed:FAILED_FINAL"
    assert len(world.called("prepare_task")) == 1 and not world.called("submit")
