"""Properties of the task state machine (hypothesis), and every path of it against the money rules."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts.task import TaskEvent, TaskStatus
from schema import state_machine as sm

statuses = st.sampled_from(list(TaskStatus))
events = st.sampled_from(list(TaskEvent))


@given(statuses, events, st.integers(min_value=0, max_value=10_000))
def test_only_table_rows_are_accepted_and_each_adds_one_to_the_version(status, event, version):
    expected = sm.TRANSITIONS.get((status, event))
    if expected is None:
        try:
            sm.apply(status, version, event)
        except sm.IllegalTransition as exc:
            assert exc.status is status and exc.event is event
        else:
            raise AssertionError(f"{status} --{event}--> accepted although not in the table")
    else:
        t = sm.apply(status, version, event)
        assert (t.from_status, t.to_status) == (status, expected)
        assert t.to_version == version + 1


@given(st.sampled_from(sorted(sm.TERMINAL)), st.lists(events, max_size=20))
def test_terminal_states_are_sticky(status, later_events):
    """Nothing a workflow, a webhook or a poll sends moves a finished task; only an operator's
    redrive starts a new run, and never of a task that produced its video (or was rejected)."""
    for event in later_events:
        to = sm.target(status, event)
        if event is TaskEvent.REDRIVE and status in sm.REDRIVABLE:
            assert to is TaskStatus.CREATED
        else:
            assert to is None


def test_succeeded_and_rejected_are_never_redriven():
    assert sm.target(TaskStatus.SUCCEEDED, TaskEvent.REDRIVE) is None
    assert sm.target(TaskStatus.REJECTED, TaskEvent.REDRIVE) is None


@given(st.lists(events, max_size=60))
def test_any_event_sequence_stays_inside_the_table(sequence):
    status, version = TaskStatus.CREATED, 0
    for event in sequence:
        to = sm.target(status, event)
        if to is None:
            continue
        assert (status, event) in sm.TRANSITIONS
        t = sm.apply(status, version, event)
        status, version = t.to_status, t.to_version
    assert version <= len(sequence)


def test_main_line_reaches_succeeded():
    path = [
        TaskEvent.VALIDATION_STARTED, TaskEvent.VALIDATION_PASSED, TaskEvent.QUEUED,
        TaskEvent.DISPATCH_CLAIMED, TaskEvent.PROVIDER_ACCEPTED, TaskEvent.PROVIDER_RUNNING,
        TaskEvent.PROVIDER_SUCCEEDED, TaskEvent.OUTPUT_PERSISTED, TaskEvent.PLAYABLE_ASSET_READY,
    ]
    status, version = TaskStatus.CREATED, 0
    for event in path:
        t = sm.apply(status, version, event)
        status, version = t.to_status, t.to_version
    assert status is TaskStatus.SUCCEEDED and version == len(path)


def test_seed_rows_that_matter_for_money():
    S, E = TaskStatus, TaskEvent
    # An ambiguous submit goes to reconciliation, never straight to a new attempt.
    assert sm.target(S.DISPATCHING, E.SUBMIT_AMBIGUOUS) is S.SUBMIT_UNKNOWN
    assert sm.target(S.SUBMIT_UNKNOWN, E.DISPATCH_CLAIMED) is None
    assert sm.target(S.SUBMIT_UNKNOWN, E.CONFIRMED_NOT_CREATED) is S.RETRY_WAIT
    # Cancel before dispatch ends the task; after, it is only an intent.
    assert sm.target(S.QUEUED, E.CANCEL_REQUESTED) is S.CANCELED
    assert sm.target(S.RUNNING, E.CANCEL_REQUESTED) is S.CANCEL_REQUESTED
    assert sm.target(S.CANCEL_REQUESTED, E.COMPLETION_WON) is S.OUTPUT_FETCHING
    # Success may skip RUNNING but cannot be forged from CREATED.
    assert sm.target(S.SUBMITTED, E.PROVIDER_SUCCEEDED) is S.OUTPUT_FETCHING
    assert sm.target(S.CREATED, E.PLAYABLE_ASSET_READY) is None
    # A late RUNNING never overwrites a later state.
    assert sm.target(S.OUTPUT_FETCHING, E.PROVIDER_RUNNING) is None
    assert sm.target(S.SUCCEEDED, E.PROVIDER_RUNNING) is None


# -- the money rules over every path (issue 18, point 7) ------------------------------------------
#
# The rules, restated here on their own (not with the module's `Past`), as what a path has seen:
# 1. no DISPATCHING after SUBMIT_UNKNOWN without a reconcile outcome: the job found, confirmed not
#    created, or a person's decision out of NEEDS_ATTENTION (accept the duplicate risk, or fail the
#    task: `resolve --fail` abandons the attempt);
# 2. nothing re-enters generation after a paid success (the provider said SUCCEEDED);
# 3. nothing moves backwards out of REVIEW.
# A reviewer's regenerate is the one way back to QUEUED after a paid success: a new paid attempt a
# person asked for (it needs a paid attempt left), so it starts a new round and both 2 and 3 begin
# anew. A redrive (`reelqueue retry`) is likewise a new run a person asked for; which ended tasks it
# picks is the command's selection, not the table's. The one regeneration of a video that failed its
# automatic checks (a template without review, `checks_failed`) is the workflow's own new round.

S, E = TaskStatus, TaskEvent
GENERATION = frozenset({S.QUEUED, S.DISPATCHING, S.RETRY_WAIT, S.SUBMITTED, S.SUBMIT_UNKNOWN, S.RUNNING})
AFTER_REVIEW = sm.TERMINAL | {S.CANCEL_REQUESTED, S.NEEDS_ATTENTION}  # ends, and the ways to one
RECONCILED = frozenset({E.PROVIDER_JOB_FOUND, E.CONFIRMED_NOT_CREATED, E.ATTENTION_RESOLVED})
UNRECONCILED, REGENERATED, BACKWARDS = "dispatch without reconcile", "generation after paid", "back out of review"


@dataclass(frozen=True)
class Seen:
    unknown: bool = False  # SUBMIT_UNKNOWN entered, no reconcile outcome since
    paid: bool = False  # the provider succeeded in this round
    reviewed: bool = False  # REVIEW entered in this round

    def after(self, status: TaskStatus, event: TaskEvent, to: TaskStatus) -> Seen:
        if event in (E.REVIEW_REGENERATE, E.REDRIVE, E.CHECKS_FAILED):
            return Seen(unknown=self.unknown)
        decided = event in RECONCILED or (status is S.NEEDS_ATTENTION and event is E.FINAL_FAILURE)
        return Seen(unknown=(self.unknown or to is S.SUBMIT_UNKNOWN) and not decided,
                    paid=self.paid or event in (E.PROVIDER_SUCCEEDED, E.COMPLETION_WON),
                    reviewed=self.reviewed or to is S.REVIEW)

    def broken(self, event: TaskEvent, to: TaskStatus) -> set[str]:
        new_round = event in (E.REVIEW_REGENERATE, E.REDRIVE, E.CHECKS_FAILED)
        return {rule for rule, breach in (
            (UNRECONCILED, self.unknown and to is S.DISPATCHING),
            (REGENERATED, self.paid and to in GENERATION and not new_round),
            (BACKWARDS, self.reviewed and to not in AFTER_REVIEW and not new_round),
        ) if breach}


Step = Callable[[TaskStatus, sm.Past, TaskEvent], "tuple[TaskStatus, sm.Past] | None"]


def current_machine(status: TaskStatus, past: sm.Past, event: TaskEvent):
    """One move as task_store makes it: the table, then the past's guard."""
    to = sm.target(status, event)
    if to is None or sm.refusal(status, event, past) is not None:
        return None
    return to, past.after(event, status, to)


# The table before issue 18: these rows more, and no guard.
OLD_ROWS = {(S.SUBMIT_UNKNOWN, E.RETRYABLE_FAILURE): S.RETRY_WAIT,
            (S.OUTPUT_FETCHING, E.RETRYABLE_FAILURE): S.RETRY_WAIT,
            (S.POST_PROCESSING, E.RETRYABLE_FAILURE): S.RETRY_WAIT}


def old_machine(status: TaskStatus, past: sm.Past, event: TaskEvent):
    to = sm.TRANSITIONS.get((status, event)) or OLD_ROWS.get((status, event))
    return None if to is None else (to, past)


def walk(step: Step) -> dict[str, list[str]]:
    """Breadth-first over every (status, past, seen) reachable from CREATED: every path of the
    machine is a walk through these finitely many states, and whether a move breaks a rule depends
    only on the state it leaves, so this visits every breach any path can make. Returns the first
    (shortest) path that breaks each rule."""
    start = (S.CREATED, sm.Past(), Seen())
    paths: dict[tuple, list[str]] = {start: []}
    todo, breaches = deque([start]), {}
    while todo:
        state = todo.popleft()
        status, past, seen = state
        for event in E:
            moved = step(status, past, event)
            if moved is None:
                continue
            to, after = moved
            path = [*paths[state], f"-{event.value}-> {to.value}"]
            for rule in seen.broken(event, to):
                breaches.setdefault(rule, path)
            following = (to, after, seen.after(status, event, to))
            if following not in paths:
                paths[following] = path
                todo.append(following)
    return breaches


def test_no_path_of_the_machine_breaks_the_money_rules():
    assert walk(current_machine) == {}


def test_the_walk_finds_the_old_tables_breaches():
    """The walk is not vacuous: on the table as it was, it finds a path breaking each rule."""
    breaches = walk(old_machine)
    assert set(breaches) == {UNRECONCILED, REGENERATED, BACKWARDS}
    assert "-retryable_failure-> RETRY_WAIT" in breaches[UNRECONCILED]
    assert breaches[BACKWARDS][-2:] == ["-cancel_requested-> CANCEL_REQUESTED", "-completion_won-> OUTPUT_FETCHING"]


def test_the_guarded_rows_are_the_only_ones_that_read_the_past():
    """task_store reads a task's past only for GUARDED rows: every other row answers the same
    whatever a reachable past says."""
    for status, past in sm.reachable():
        for event in E:
            if (status, event) not in sm.GUARDED:
                assert sm.refusal(status, event, past) is None, (status, event, past)
    assert {(S.QUEUED, E.DISPATCH_CLAIMED), (S.CANCEL_REQUESTED, E.COMPLETION_WON),
                          (S.NEEDS_ATTENTION, E.ATTENTION_RESOLVED), (S.NEEDS_ATTENTION, E.SUBMIT_AMBIGUOUS),
                          (S.NEEDS_ATTENTION, E.PROVIDER_RUNNING), (S.NEEDS_ATTENTION, E.STRAYS_DECIDED)} == sm.GUARDED


def run_path(events: list[TaskEvent], start: TaskStatus = S.CREATED) -> TaskStatus:
    """Apply `events` as task_store does (the past folded from the moves so far); raises
    IllegalTransition at the first refused one."""
    status, version, past = start, 0, sm.Past()
    for event in events:
        move = sm.apply(status, version, event, past)
        past = past.after(event, status, move.to_status)
        status, version = move.to_status, move.to_version
    return status


# The moves workflows/generation/ emits (`_move` / `_end`), path by path.
TO_QUEUE = [E.VALIDATION_STARTED, E.VALIDATION_PASSED, E.QUEUED]
SUBMIT = [E.DISPATCH_CLAIMED, E.PROVIDER_ACCEPTED]
DELIVER = [E.PROVIDER_SUCCEEDED, E.OUTPUT_PERSISTED]
TO_REVIEW = [*TO_QUEUE, *SUBMIT, E.PROVIDER_RUNNING, *DELIVER, E.REVIEW_REQUIRED]
UNKNOWN = [*TO_QUEUE, E.DISPATCH_CLAIMED, E.SUBMIT_AMBIGUOUS]
WORKFLOW_PATHS = {
    "success": ([*TO_QUEUE, *SUBMIT, E.PROVIDER_RUNNING, *DELIVER, E.PLAYABLE_ASSET_READY], S.SUCCEEDED),
    "invalid": ([E.VALIDATION_STARTED, E.VALIDATION_FAILED], S.INVALID),
    "no credit": ([E.VALIDATION_STARTED, E.FINAL_FAILURE], S.FAILED_FINAL),
    "refused submit, retried": ([*TO_QUEUE, E.DISPATCH_CLAIMED, E.RETRYABLE_FAILURE, E.RETRY_DUE, *SUBMIT, *DELIVER,
                                 E.PLAYABLE_ASSET_READY], S.SUCCEEDED),
    "job failed, retried": ([*TO_QUEUE, *SUBMIT, E.PROVIDER_RUNNING, E.RETRYABLE_FAILURE, E.RETRY_DUE, *SUBMIT,
                             *DELIVER, E.PLAYABLE_ASSET_READY], S.SUCCEEDED),
    "job failed for good": ([*TO_QUEUE, *SUBMIT, E.FINAL_FAILURE], S.FAILED_FINAL),
    "retry budget spent": ([*TO_QUEUE, *SUBMIT, E.RETRYABLE_FAILURE, E.RETRY_DUE, E.FINAL_FAILURE], S.FAILED_FINAL),
    "unknown, found": ([*UNKNOWN, E.PROVIDER_JOB_FOUND, E.PROVIDER_RUNNING, *DELIVER, E.PLAYABLE_ASSET_READY],
                       S.SUCCEEDED),
    "unknown, not created": ([*UNKNOWN, E.CONFIRMED_NOT_CREATED, E.RETRY_DUE, *SUBMIT, *DELIVER,
                              E.PLAYABLE_ASSET_READY], S.SUCCEEDED),
    "unknown, not created, cancel": ([*UNKNOWN, E.CONFIRMED_NOT_CREATED, E.CANCEL_REQUESTED], S.CANCELED),
    "unknown, asked again": ([*UNKNOWN, E.NEEDS_ATTENTION, E.SUBMIT_AMBIGUOUS, E.PROVIDER_JOB_FOUND, *DELIVER,
                              E.PLAYABLE_ASSET_READY], S.SUCCEEDED),
    "unknown, risk accepted": ([*UNKNOWN, E.NEEDS_ATTENTION, E.ATTENTION_RESOLVED, *SUBMIT, *DELIVER,
                                E.PLAYABLE_ASSET_READY], S.SUCCEEDED),
    "unknown, failed by a person, redriven": ([*UNKNOWN, E.NEEDS_ATTENTION, E.FINAL_FAILURE, E.REDRIVE, *TO_QUEUE,
                                               *SUBMIT, *DELIVER, E.PLAYABLE_ASSET_READY], S.SUCCEEDED),
    "status outage, polling resumed": ([*TO_QUEUE, *SUBMIT, E.PROVIDER_RUNNING, E.NEEDS_ATTENTION,
                                        E.PROVIDER_RUNNING, *DELIVER, E.PLAYABLE_ASSET_READY], S.SUCCEEDED),
    "cancel while queued": ([*TO_QUEUE, E.CANCEL_REQUESTED], S.CANCELED),
    "cancel in retry wait": ([*TO_QUEUE, *SUBMIT, E.RETRYABLE_FAILURE, E.CANCEL_REQUESTED], S.CANCELED),
    "cancel while running": ([*TO_QUEUE, *SUBMIT, E.PROVIDER_RUNNING, E.CANCEL_REQUESTED, E.CANCEL_CONFIRMED],
                             S.CANCELED),
    "cancel, completion won": ([*TO_QUEUE, *SUBMIT, E.CANCEL_REQUESTED, E.COMPLETION_WON, E.OUTPUT_PERSISTED,
                                E.PLAYABLE_ASSET_READY], S.SUCCEEDED),
    "cancel stuck, retried": ([*TO_QUEUE, *SUBMIT, E.CANCEL_REQUESTED, E.NEEDS_ATTENTION, E.CANCEL_REQUESTED,
                               E.CANCEL_CONFIRMED], S.CANCELED),
    "cancel stuck, failed by a person": ([*TO_QUEUE, *SUBMIT, E.CANCEL_REQUESTED, E.NEEDS_ATTENTION,
                                          E.FINAL_FAILURE], S.FAILED_FINAL),
    "job deadline": ([*TO_QUEUE, *SUBMIT, E.PROVIDER_RUNNING, E.DEADLINE_PASSED], S.EXPIRED),
    "job deadline, succeeded meanwhile": ([*TO_QUEUE, *SUBMIT, E.PROVIDER_RUNNING, *DELIVER,
                                           E.PLAYABLE_ASSET_READY], S.SUCCEEDED),
    "job deadline, stop stuck": ([*TO_QUEUE, *SUBMIT, E.NEEDS_ATTENTION, E.CANCEL_REQUESTED, E.DEADLINE_PASSED],
                                 S.EXPIRED),
    "task deadline while queued": ([*TO_QUEUE, E.DEADLINE_PASSED], S.EXPIRED),
    "fetch failed, redriven": ([*TO_QUEUE, *SUBMIT, E.PROVIDER_SUCCEEDED, E.FINAL_FAILURE, E.REDRIVE, *TO_QUEUE,
                                *SUBMIT, *DELIVER, E.PLAYABLE_ASSET_READY], S.SUCCEEDED),
    "transcode failed": ([*TO_QUEUE, *SUBMIT, *DELIVER, E.FINAL_FAILURE], S.FAILED_FINAL),
    "review approved": ([*TO_REVIEW, E.REVIEW_APPROVED], S.SUCCEEDED),
    "review rejected": ([*TO_REVIEW, E.REVIEW_REJECTED], S.REJECTED),
    "review deadline": ([*TO_REVIEW, E.DEADLINE_PASSED], S.EXPIRED),
    "cancel in review": ([*TO_REVIEW, E.CANCEL_REQUESTED, E.CANCEL_CONFIRMED], S.CANCELED),
    "regenerate, refused, approved": ([*TO_REVIEW, E.REVIEW_REGENERATE, E.DISPATCH_CLAIMED, E.RETRYABLE_FAILURE,
                                       E.RETRY_DUE, *SUBMIT, *DELIVER, E.REVIEW_REQUIRED, E.REVIEW_APPROVED],
                                      S.SUCCEEDED),
    "regenerate, unknown, found": ([*TO_REVIEW, E.REVIEW_REGENERATE, E.DISPATCH_CLAIMED, E.SUBMIT_AMBIGUOUS,
                                    E.PROVIDER_JOB_FOUND, *DELIVER, E.PLAYABLE_ASSET_READY], S.SUCCEEDED),
    "stray refused, decided, delivered": ([*UNKNOWN, E.PROVIDER_JOB_FOUND, *DELIVER, E.NEEDS_ATTENTION,
                                           E.STRAYS_DECIDED, E.PLAYABLE_ASSET_READY], S.SUCCEEDED),
    "stray refused, decided, to review": ([*UNKNOWN, E.PROVIDER_JOB_FOUND, *DELIVER, E.NEEDS_ATTENTION,
                                           E.STRAYS_DECIDED, E.REVIEW_REQUIRED, E.REVIEW_APPROVED], S.SUCCEEDED),
    "stray refused on a cancel": ([*UNKNOWN, E.PROVIDER_JOB_FOUND, E.CANCEL_REQUESTED, E.NEEDS_ATTENTION,
                                   E.CANCEL_REQUESTED, E.CANCEL_CONFIRMED], S.CANCELED),
    "stray refused, failed by a person": ([*UNKNOWN, E.PROVIDER_JOB_FOUND, *DELIVER, E.NEEDS_ATTENTION,
                                           E.FINAL_FAILURE], S.FAILED_FINAL),
    "cancelled before start, redriven": ([E.CANCEL_REQUESTED, E.REDRIVE, *TO_QUEUE, *SUBMIT, *DELIVER,
                                          E.PLAYABLE_ASSET_READY], S.SUCCEEDED),
}


@pytest.mark.parametrize("name", sorted(WORKFLOW_PATHS))
def test_every_path_the_workflow_emits_is_allowed(name):
    events, ending = WORKFLOW_PATHS[name]
    assert run_path(events) is ending


@pytest.mark.parametrize("events", [
    # Issue 18: a second submit without a reconcile, a resubmit after a paid success, backwards.
    [*UNKNOWN, E.RETRYABLE_FAILURE],
    [*TO_QUEUE, *SUBMIT, E.PROVIDER_SUCCEEDED, E.RETRYABLE_FAILURE],
    [*TO_QUEUE, *SUBMIT, *DELIVER, E.RETRYABLE_FAILURE],
    [*TO_REVIEW, E.CANCEL_REQUESTED, E.COMPLETION_WON],
    # The same by detours the table alone cannot see.
    [*UNKNOWN, E.NEEDS_ATTENTION, E.PROVIDER_RUNNING, E.RETRYABLE_FAILURE, E.RETRY_DUE, E.DISPATCH_CLAIMED],
    [*UNKNOWN, E.CANCEL_REQUESTED, E.CANCEL_CONFIRMED, E.REDRIVE, *TO_QUEUE, E.DISPATCH_CLAIMED],
    [*TO_REVIEW, E.NEEDS_ATTENTION, E.ATTENTION_RESOLVED],
    [*TO_REVIEW, E.CANCEL_REQUESTED, E.NEEDS_ATTENTION, E.PROVIDER_RUNNING],
    [*TO_QUEUE, *SUBMIT, *DELIVER, E.NEEDS_ATTENTION, E.SUBMIT_AMBIGUOUS],
    # strays-v1: back to the output only for a paid video not yet in review.
    [*TO_QUEUE, *SUBMIT, E.NEEDS_ATTENTION, E.STRAYS_DECIDED],
    [*TO_REVIEW, E.NEEDS_ATTENTION, E.STRAYS_DECIDED],
], ids=["unknown-retry", "fetching-retry", "post-processing-retry", "review-cancel-completion",
        "unknown-attention-running-retry", "unknown-cancel-redrive", "review-attention-requeue",
        "review-cancel-attention-running", "post-processing-attention-unknown", "unpaid-strays-decided",
        "review-strays-decided"])
def test_forbidden_paths_are_refused_at_their_last_move(events):
    assert run_path(events[:-1]) is not None
    with pytest.raises(sm.IllegalTransition):
        run_path(events)
