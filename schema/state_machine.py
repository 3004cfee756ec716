"""The task state machine: one explicit transition table, nothing else decides a status.

Pure module (no I/O): the workflow sandbox, the activities and the tests all import it. Rows follow
docs/architecture.md ("Task state machine"), review and needs-attention rows included. A transition is
looked up by (current status, event); terminal statuses accept nothing, so a late event can never
overwrite SUCCEEDED or CANCELED. The statuses and events themselves are contracts (contracts/task.py):
every layer names them.

A status alone cannot say what money a task has spent: a CANCEL_REQUESTED task may be stopping a
job or holding a paid video in review. So a few rows (`GUARDED`) also ask the task's `Past`, folded
from its applied state events: no new submit while an earlier one's outcome is unknown, and no way
back to generating once the video is paid for (a reviewer's regenerate or a redrive starts a new round).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import StrEnum

from contracts.task import TaskEvent, TaskStatus

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
# Where a step can fail in a way that is safe to retry after a wait (a new submit follows). Not
# SUBMIT_UNKNOWN (only reconcile or a person may conclude a submit), nor OUTPUT_FETCHING and
# POST_PROCESSING (the video is paid for: those steps retry on their own, never by a resubmit).
RETRYABLE_FROM: frozenset[TaskStatus] = frozenset(
    {S.VALIDATING, S.QUOTA_RESERVED, S.QUEUED, S.DISPATCHING, S.SUBMITTED, S.RUNNING}
)
# Where the task asks a provider for a video: after a paid success it never comes back here,
# except by a reviewer's regenerate (a new paid attempt a person asked for), a redrive, or the one
# regeneration of a video that failed its automatic checks (a template without review).
GENERATING: frozenset[TaskStatus] = frozenset(
    {S.QUEUED, S.DISPATCHING, S.SUBMITTED, S.SUBMIT_UNKNOWN, S.RUNNING, S.RETRY_WAIT}
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
        (S.POST_PROCESSING, E.CHECKS_FAILED): S.QUEUED,
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
    """The (status, event) pair is not in the table, or the task's past forbids it (`reason`);
    the caller must not write anything."""

    def __init__(self, status: TaskStatus, event: TaskEvent, reason: str | None = None):
        super().__init__(f"no transition from {status} on {event}" + (f": {reason}" if reason else ""))
        self.status = status
        self.event = event
        self.reason = reason


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


# Events after which a submit whose outcome was unknown is concluded: the provider's answer
# (found / not created) or a person's decision (accept the duplicate risk).
SUBMIT_CONCLUDED: frozenset[TaskEvent] = frozenset(
    {E.PROVIDER_JOB_FOUND, E.CONFIRMED_NOT_CREATED, E.ATTENTION_RESOLVED}
)


# Events that start a new paid round after a paid video: a reviewer's regenerate, a redrive, failed checks.
NEW_ROUND: frozenset[TaskEvent] = frozenset({E.REVIEW_REGENERATE, E.REDRIVE, E.CHECKS_FAILED})


@dataclass(frozen=True)
class Past:
    """What a task has been through that its status does not say, as far as money goes: the fold
    of its applied state events, oldest first (`replay`). Postgres adds its attempt rows to
    `unknown_submit` (schema/task_store.py)."""

    paid: bool = False  # a job of this round succeeded (OUTPUT_FETCHING reached): the video is paid for
    unknown_submit: bool = False  # a submit's outcome is unknown and nothing concluded it since
    reviewed: bool = False  # this round's video entered REVIEW

    def after(self, event: TaskEvent, from_status: TaskStatus, to_status: TaskStatus) -> Past:
        """The past once `event` moved the task from `from_status` to `to_status`."""
        if event in NEW_ROUND:  # a new round a person (or a failed automatic check) asked for
            return replace(self, paid=False, reviewed=False)
        if to_status is S.OUTPUT_FETCHING:
            return replace(self, paid=True)
        if to_status is S.REVIEW:
            return replace(self, reviewed=True)
        if event is E.SUBMIT_AMBIGUOUS:
            return replace(self, unknown_submit=True)
        # `resolve --fail` out of NEEDS_ATTENTION abandons the unknown attempt (a person's decision).
        if event in SUBMIT_CONCLUDED or (event is E.FINAL_FAILURE and from_status is S.NEEDS_ATTENTION):
            return replace(self, unknown_submit=False)
        return self

    @classmethod
    def replay(cls, moves: Iterable[tuple[str, str, str]]) -> Past:
        """Fold applied (event, from status, to status) moves, oldest first."""
        past = cls()
        for event, from_status, to_status in moves:
            past = past.after(TaskEvent(event), TaskStatus(from_status), TaskStatus(to_status))
        return past


def refusal(status: TaskStatus, event: TaskEvent, past: Past) -> str | None:
    """Why the task's past forbids this row of the table, or None (also for a row not in it)."""
    to = target(status, event)
    if to is None:
        return None
    if event is E.DISPATCH_CLAIMED and past.unknown_submit:
        return "an earlier submit's outcome is unknown: it must be reconciled (or its risk accepted) first"
    if past.paid and to in GENERATING | {S.OUTPUT_FETCHING} and event not in NEW_ROUND:
        return "the video is paid for: only a reviewer's regenerate (or failed checks) asks the provider again"
    if event is E.STRAYS_DECIDED and (not past.paid or past.reviewed):
        return "only a paid video not yet in review goes back to POST_PROCESSING after a decision on strays"
    return None


def reachable() -> frozenset[tuple[TaskStatus, Past]]:
    """Every (status, past) a task can be in, from CREATED with no past, moving only as allowed."""
    start = (S.CREATED, Past())
    seen, todo = {start}, [start]
    while todo:
        status, past = todo.pop()
        for event in TaskEvent:
            to = target(status, event)
            if to is None or refusal(status, event, past) is not None:
                continue
            state = (to, past.after(event, status, to))
            if state not in seen:
                seen.add(state)
                todo.append(state)
    return frozenset(seen)


# The rows whose answer depends on the past: only these read a task's history in Postgres (the
# common moves cost nothing more).
GUARDED: frozenset[tuple[TaskStatus, TaskEvent]] = frozenset(
    (status, event) for status, past in reachable() for event in TaskEvent if refusal(status, event, past)
)


def needs_past(status: TaskStatus, event: TaskEvent) -> bool:
    return (TaskStatus(status), TaskEvent(event)) in GUARDED


def apply(status: TaskStatus, version: int, event: TaskEvent, past: Past | None = None) -> Transition:
    """Decide one transition; raises IllegalTransition for anything outside the table, or (given
    the task's past) anything its past forbids."""
    status, event = TaskStatus(status), TaskEvent(event)
    to = target(status, event)
    if to is None:
        raise IllegalTransition(status, event)
    reason = refusal(status, event, past) if past is not None else None
    if reason is not None:
        raise IllegalTransition(status, event, reason)
    return Transition(status, to, event, version, version + 1)


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
