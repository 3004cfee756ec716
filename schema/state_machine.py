"""The task state machine: one explicit transition table, nothing else decides a status.

Pure module (no I/O): the workflow sandbox, the activities and the tests all import it. Rows follow
docs/architecture.md ("Task state machine"), review and needs-attention rows included. A transition is
looked up by (current status, event); terminal statuses accept nothing, so a late event can never
overwrite SUCCEEDED or CANCELED.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class TaskStatus(StrEnum):
    CREATED = "CREATED"
    VALIDATING = "VALIDATING"
    INVALID = "INVALID"
    QUOTA_RESERVED = "QUOTA_RESERVED"
    QUEUED = "QUEUED"
    DISPATCHING = "DISPATCHING"
    SUBMITTED = "SUBMITTED"
    SUBMIT_UNKNOWN = "SUBMIT_UNKNOWN"
    RUNNING = "RUNNING"
    RETRY_WAIT = "RETRY_WAIT"
    OUTPUT_FETCHING = "OUTPUT_FETCHING"
    POST_PROCESSING = "POST_PROCESSING"
    REVIEW = "REVIEW"
    CANCEL_REQUESTED = "CANCEL_REQUESTED"
    NEEDS_ATTENTION = "NEEDS_ATTENTION"
    SUCCEEDED = "SUCCEEDED"
    CANCELED = "CANCELED"
    REJECTED = "REJECTED"
    FAILED_FINAL = "FAILED_FINAL"
    EXPIRED = "EXPIRED"


class TaskEvent(StrEnum):
    VALIDATION_STARTED = "validation_started"
    VALIDATION_PASSED = "validation_passed"
    VALIDATION_FAILED = "validation_failed"
    REVALIDATE = "revalidate"
    QUEUED = "queued"
    DISPATCH_CLAIMED = "dispatch_claimed"
    PROVIDER_ACCEPTED = "provider_accepted"
    SUBMIT_AMBIGUOUS = "submit_ambiguous"
    PROVIDER_JOB_FOUND = "provider_job_found"
    CONFIRMED_NOT_CREATED = "confirmed_not_created"
    PROVIDER_RUNNING = "provider_running"
    PROVIDER_SUCCEEDED = "provider_succeeded"
    OUTPUT_PERSISTED = "output_persisted"
    PLAYABLE_ASSET_READY = "playable_asset_ready"
    REVIEW_REQUIRED = "review_required"
    REVIEW_APPROVED = "review_approved"
    REVIEW_REJECTED = "review_rejected"
    REVIEW_REGENERATE = "review_regenerate"  # a reviewer asked for a new attempt (maybe with an edited prompt)
    RETRYABLE_FAILURE = "retryable_failure"
    RETRY_DUE = "retry_due"
    CANCEL_REQUESTED = "cancel_requested"
    CANCEL_CONFIRMED = "cancel_confirmed"
    COMPLETION_WON = "completion_won"
    NEEDS_ATTENTION = "needs_attention"
    ATTENTION_RESOLVED = "attention_resolved"
    FINAL_FAILURE = "final_failure"
    DEADLINE_PASSED = "deadline_passed"
    REDRIVE = "redrive"  # `reelqueue retry`: a new run of a task that ended without a video
    # A person decided on duplicate jobs that held up the task's end: back to its delivered output.
    STRAYS_DECIDED = "strays_decided"
    # Audit only, never in the table (so never moves a task): a final object key already held other
    # bytes; the stored object was kept and the new bytes set aside (adapters/storage.py).
    STORAGE_CONFLICT = "storage_conflict"


S = TaskStatus
E = TaskEvent

TERMINAL: frozenset[TaskStatus] = frozenset({S.SUCCEEDED, S.CANCELED, S.REJECTED, S.FAILED_FINAL, S.EXPIRED})
NON_TERMINAL: frozenset[TaskStatus] = frozenset(set(TaskStatus) - TERMINAL)

# No provider job is live (none yet, or every earlier one is known ended): cancelling ends the task.
PRE_DISPATCH: frozenset[TaskStatus] = frozenset(
    {S.CREATED, S.VALIDATING, S.INVALID, S.QUOTA_RESERVED, S.QUEUED, S.RETRY_WAIT}
)
# A provider job may exist: cancelling is only an intent until the provider confirms. A task
# waits in NEEDS_ATTENTION only while a job may exist, so it belongs here too.
PROVIDER_SIDE: frozenset[TaskStatus] = frozenset(
    {S.DISPATCHING, S.SUBMITTED, S.SUBMIT_UNKNOWN, S.RUNNING, S.OUTPUT_FETCHING, S.POST_PROCESSING, S.REVIEW,
     S.NEEDS_ATTENTION}
)
# Where a step can fail in a way that is safe to retry after a wait.
RETRYABLE_FROM: frozenset[TaskStatus] = frozenset(
    {
        S.VALIDATING,
        S.QUOTA_RESERVED,
        S.QUEUED,
        S.DISPATCHING,
        S.SUBMITTED,
        S.SUBMIT_UNKNOWN,
        S.RUNNING,
        S.OUTPUT_FETCHING,
        S.POST_PROCESSING,
    }
)


# Ended without a video: a person may start a new run (new reservation, attempt numbers continue).
# SUCCEEDED and REJECTED are never re-run.
REDRIVABLE: frozenset[TaskStatus] = frozenset({S.FAILED_FINAL, S.EXPIRED, S.CANCELED})


def _table() -> dict[tuple[TaskStatus, TaskEvent], TaskStatus]:
    t: dict[tuple[TaskStatus, TaskEvent], TaskStatus] = {
        (S.CREATED, E.VALIDATION_STARTED): S.VALIDATING,
        (S.VALIDATING, E.VALIDATION_PASSED): S.QUOTA_RESERVED,
        (S.VALIDATING, E.VALIDATION_FAILED): S.INVALID,
        (S.INVALID, E.REVALIDATE): S.VALIDATING,
        (S.QUOTA_RESERVED, E.QUEUED): S.QUEUED,
        (S.QUEUED, E.DISPATCH_CLAIMED): S.DISPATCHING,
        (S.DISPATCHING, E.PROVIDER_ACCEPTED): S.SUBMITTED,
        (S.DISPATCHING, E.SUBMIT_AMBIGUOUS): S.SUBMIT_UNKNOWN,
        (S.SUBMIT_UNKNOWN, E.PROVIDER_JOB_FOUND): S.SUBMITTED,
        (S.SUBMIT_UNKNOWN, E.CONFIRMED_NOT_CREATED): S.RETRY_WAIT,
        (S.SUBMITTED, E.PROVIDER_RUNNING): S.RUNNING,
        (S.SUBMITTED, E.PROVIDER_SUCCEEDED): S.OUTPUT_FETCHING,
        (S.RUNNING, E.PROVIDER_SUCCEEDED): S.OUTPUT_FETCHING,
        (S.OUTPUT_FETCHING, E.OUTPUT_PERSISTED): S.POST_PROCESSING,
        (S.POST_PROCESSING, E.PLAYABLE_ASSET_READY): S.SUCCEEDED,
        (S.POST_PROCESSING, E.REVIEW_REQUIRED): S.REVIEW,
        (S.REVIEW, E.REVIEW_APPROVED): S.SUCCEEDED,
        (S.REVIEW, E.REVIEW_REJECTED): S.REJECTED,
        (S.REVIEW, E.REVIEW_REGENERATE): S.QUEUED,
        (S.RETRY_WAIT, E.RETRY_DUE): S.QUEUED,
        (S.CANCEL_REQUESTED, E.CANCEL_CONFIRMED): S.CANCELED,
        (S.CANCEL_REQUESTED, E.COMPLETION_WON): S.OUTPUT_FETCHING,
        # An operator's decisions (the `resolve` update): submit anew, or run the stuck step again.
        (S.NEEDS_ATTENTION, E.ATTENTION_RESOLVED): S.QUEUED,
        (S.NEEDS_ATTENTION, E.SUBMIT_AMBIGUOUS): S.SUBMIT_UNKNOWN,
        (S.NEEDS_ATTENTION, E.PROVIDER_RUNNING): S.RUNNING,
        (S.NEEDS_ATTENTION, E.STRAYS_DECIDED): S.POST_PROCESSING,
    }
    for status in REDRIVABLE:
        t[(status, E.REDRIVE)] = S.CREATED
    for status in RETRYABLE_FROM:
        t[(status, E.RETRYABLE_FAILURE)] = S.RETRY_WAIT
    for status in PRE_DISPATCH:
        t[(status, E.CANCEL_REQUESTED)] = S.CANCELED
    for status in PROVIDER_SIDE:
        t[(status, E.CANCEL_REQUESTED)] = S.CANCEL_REQUESTED
    for status in NON_TERMINAL:
        t[(status, E.FINAL_FAILURE)] = S.FAILED_FINAL
        t[(status, E.DEADLINE_PASSED)] = S.EXPIRED
        if status is not S.NEEDS_ATTENTION:
            t[(status, E.NEEDS_ATTENTION)] = S.NEEDS_ATTENTION
    return t


TRANSITIONS: dict[tuple[TaskStatus, TaskEvent], TaskStatus] = _table()


class IllegalTransition(Exception):
    """The (status, event) pair is not in the table; the caller must not write anything."""

    def __init__(self, status: TaskStatus, event: TaskEvent):
        super().__init__(f"no transition from {status} on {event}")
        self.status = status
        self.event = event


@dataclass(frozen=True)
class Transition:
    from_status: TaskStatus
    to_status: TaskStatus
    event: TaskEvent
    from_version: int
    to_version: int


def target(status: TaskStatus, event: TaskEvent) -> TaskStatus | None:
    """The status `event` leads to from `status`, or None when the table has no such row."""
    return TRANSITIONS.get((TaskStatus(status), TaskEvent(event)))


def apply(status: TaskStatus, version: int, event: TaskEvent) -> Transition:
    """Decide one transition; raises IllegalTransition for anything outside the table."""
    to = target(status, event)
    if to is None:
        raise IllegalTransition(TaskStatus(status), TaskEvent(event))
    return Transition(TaskStatus(status), to, TaskEvent(event), version, version + 1)


def is_terminal(status: TaskStatus | str) -> bool:
    return TaskStatus(status) in TERMINAL


class AttemptState(StrEnum):
    """Seed 002 section 4.5.2: one provider submit attempt."""

    NEW = "NEW"
    SENDING = "SENDING"
    ACKED = "ACKED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELED = "CANCELED"
    UNKNOWN = "UNKNOWN"
    FAILED_BEFORE_ACCEPT = "FAILED_BEFORE_ACCEPT"
    ABANDONED = "ABANDONED"  # outcome never learned; an operator accepted the risk (state event says who)


# Attempt states after which the attempt's job (if any) can no longer bill more.
ATTEMPT_SETTLED: frozenset[AttemptState] = frozenset(
    {AttemptState.SUCCEEDED, AttemptState.FAILED, AttemptState.CANCELED, AttemptState.FAILED_BEFORE_ACCEPT,
     AttemptState.ABANDONED}
)
# Attempt states whose outcome is not known yet: only reconcile may conclude them.
ATTEMPT_UNRESOLVED: frozenset[AttemptState] = frozenset({AttemptState.SENDING, AttemptState.UNKNOWN})
