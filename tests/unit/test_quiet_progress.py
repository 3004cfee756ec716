"""Which webhooks the gateway records on the task row instead of signaling the workflow (issue 45,
item 3), and that a RUNNING recorded there leaves every later move of the workflow legal."""

from __future__ import annotations

import pytest

from contracts.messages import ProviderUpdate
from contracts.provider import JobStatus
from contracts.task import TaskEvent, TaskStatus
from schema import state_machine as sm
from schema.quiet_progress import BEFORE, QUIET_FROM, Quiet, decide, signed_running
from workflows.observations import needs_status_call, worth_a_signal

S, E = TaskStatus, TaskEvent


def update(status: JobStatus | None, *, verified: bool = True) -> ProviderUpdate:
    return ProviderUpdate(job_id="j", status=status, event_id="e", verified=verified)


def quiet(status: JobStatus | None, task: TaskStatus = S.SUBMITTED, *, verified: bool = True,
          opted_in: bool = True, current_job: bool = True) -> Quiet:
    return decide(update(status, verified=verified), status=task, opted_in=opted_in, current_job=current_job)


def test_only_a_signed_running_is_progress_the_gateway_may_record():
    assert signed_running(update(JobStatus.RUNNING))
    assert not signed_running(update(JobStatus.RUNNING, verified=False))  # a hint: confirmed by a status call
    for ending in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELED, JobStatus.EXPIRED):
        assert not signed_running(update(ending))  # an ending brings outputs and cost: always a signal
    assert not signed_running(update(JobStatus.QUEUED)) and not worth_a_signal(update(JobStatus.QUEUED))
    assert not signed_running(update(None))


def test_what_the_gateway_may_record_is_what_the_workflow_acts_on_without_a_status_call():
    """The workflow's own reading of the same news: signaled today, and no status call needed."""
    for status in (*JobStatus, None):
        for verified in (True, False):
            news = update(status, verified=verified)
            if signed_running(news):
                assert worth_a_signal(news) and not needs_status_call(news)


def test_a_signed_running_of_a_run_that_opted_in_is_recorded_not_signaled():
    assert quiet(JobStatus.RUNNING) is Quiet.RECORD


@pytest.mark.parametrize("status", [JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELED, JobStatus.EXPIRED,
                                    None])
def test_finals_and_bare_wakeups_still_signal(status):
    assert quiet(status) is Quiet.SIGNAL


def test_unsigned_ones_still_signal():
    assert quiet(JobStatus.RUNNING, verified=False) is Quiet.SIGNAL


def test_runs_that_did_not_opt_in_are_still_signaled():
    for task in TaskStatus:
        assert quiet(JobStatus.RUNNING, task, opted_in=False) is Quiet.SIGNAL


def test_another_job_of_the_task_is_left_to_the_workflow():
    """A duplicate matched by our request key, or an abandoned attempt's job, must not move the task:
    the workflow follows only its current job, as before."""
    assert quiet(JobStatus.RUNNING, current_job=False) is Quiet.SIGNAL


def test_a_task_whose_acceptance_is_not_recorded_yet_still_hears_it():
    """The job is on the attempt's row before the task is SUBMITTED (a reconcile found it): the table
    has no move from there, and the workflow would otherwise learn RUNNING only at its next status call."""
    assert set(BEFORE) == {S.DISPATCHING, S.SUBMIT_UNKNOWN}
    for task in BEFORE:
        assert quiet(JobStatus.RUNNING, task) is Quiet.SIGNAL


def test_a_task_further_along_keeps_the_inbox_row_only():
    further = set(TaskStatus) - QUIET_FROM - BEFORE
    assert {S.RUNNING, S.OUTPUT_FETCHING, S.POST_PROCESSING, S.REVIEW, S.CANCEL_REQUESTED, S.NEEDS_ATTENTION,
            *sm.TERMINAL} <= further
    for task in further:
        assert quiet(JobStatus.RUNNING, task) is Quiet.KEEP


def test_the_gateway_moves_only_from_where_the_table_allows_and_never_back():
    """From the table's own rows for a job seen running, less the operator's resume out of
    NEEDS_ATTENTION: only SUBMITTED, and only forward, to RUNNING."""
    assert set(QUIET_FROM) == {S.SUBMITTED}
    assert not QUIET_FROM & (sm.TERMINAL | {S.NEEDS_ATTENTION})
    for task in QUIET_FROM:
        assert sm.apply(task, 3, E.PROVIDER_RUNNING).to_status is S.RUNNING
        assert not sm.needs_past(task, E.PROVIDER_RUNNING)  # nothing of the task's past can refuse it


def test_every_later_move_of_the_workflow_is_legal_from_running_too():
    """The workflow never hears of a RUNNING the gateway recorded: whatever it sends next, believing
    the task SUBMITTED (a success seen by a status call, a failure, a cancel, its deadline, a person
    asked), the table takes it from RUNNING to the same status."""
    later = [e for e in TaskEvent if e is not E.PROVIDER_RUNNING and sm.target(S.SUBMITTED, e) is not None]
    assert {E.PROVIDER_SUCCEEDED, E.RETRYABLE_FAILURE, E.CANCEL_REQUESTED, E.FINAL_FAILURE,
            E.DEADLINE_PASSED, E.NEEDS_ATTENTION} <= set(later)
    for event in later:
        assert sm.target(S.RUNNING, event) is sm.target(S.SUBMITTED, event), event
        assert sm.needs_past(S.RUNNING, event) == sm.needs_past(S.SUBMITTED, event), event

