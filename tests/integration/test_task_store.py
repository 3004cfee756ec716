"""task_store.transition on real Postgres: a new event moves the task once, the same source event
again is answered from what was recorded, an event the table refuses is kept for audit only."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select, update
from stack_helpers import import_small

from contracts.task import TaskEvent
from schema import queries
from schema import state_machine as sm
from schema.db import Database
from schema.models import Attempt, StateEvent
from schema.task_store import TaskNotFound, transition

pytestmark = pytest.mark.integration
E = TaskEvent


def test_transition_once_per_source_event(stack, tmp_path):
    summary = import_small(stack, tmp_path, [("TS-1", "Lamp", "A lamp")])
    db = Database(stack.database_url)
    with db.transaction() as session:
        (task,) = queries.list_tasks(session, summary.import_id)

    def move(event: TaskEvent, source_event_id: str):
        with db.transaction() as session:
            return transition(session, task.id, event, source="test", source_event_id=source_event_id)

    first = move(E.VALIDATION_STARTED, "e1")
    assert (first.applied, first.duplicate, first.from_status, first.status, first.version) == (
        True, False, "CREATED", "VALIDATING", 1)
    assert first.conflicts == 0 and first.left_after_s is not None and first.left_after_s >= 0
    again = move(E.VALIDATION_STARTED, "e1")
    assert (again.applied, again.duplicate, again.from_status, again.status, again.version) == (
        True, True, "CREATED", "VALIDATING", 1)
    refused = move(E.VALIDATION_STARTED, "e2")  # VALIDATING has no such move
    assert (refused.applied, refused.duplicate, refused.status, refused.version) == (False, False, "VALIDATING", 1)
    refused_again = move(E.VALIDATION_STARTED, "e2")
    assert (refused_again.applied, refused_again.duplicate, refused_again.from_status) == (False, True, "VALIDATING")
    with db.transaction() as session:
        events = session.execute(select(StateEvent.source_event_id, StateEvent.applied, StateEvent.to_status)
                                 .where(StateEvent.task_id == task.id).order_by(StateEvent.id)).all()
        assert [tuple(e) for e in events] == [("e1", True, "VALIDATING"), ("e2", False, "VALIDATING")]
        assert session.scalar(select(func.count()).select_from(StateEvent).where(StateEvent.task_id == task.id)) == 2
    with pytest.raises(TaskNotFound), db.transaction() as session:
        transition(session, "no-such-task", E.VALIDATION_STARTED, source="test", source_event_id="e3")


def test_rows_that_depend_on_the_past_read_it_in_the_transaction(stack, tmp_path):
    """Issue 18: a second submit while one's outcome is unknown, and a paid video moving back, are
    refused on Postgres: the guard folds the task's applied state events and reads its attempt
    rows, and the refused event says why."""
    summary = import_small(stack, tmp_path, [("TS-2", "Desk", "A desk"), ("TS-3", "Chair", "A chair"),
                                             ("TS-4", "Rug", "A rug")])
    db = Database(stack.database_url)
    with db.transaction() as session:
        detour, attempt_open, reviewed = (t.id for t in queries.list_tasks(session, summary.import_id))

    def move(task_id: str, event: TaskEvent):
        with db.transaction() as session:
            n = session.scalar(select(func.count()).select_from(StateEvent).where(StateEvent.task_id == task_id))
            return transition(session, task_id, event, source="test", source_event_id=f"{task_id}:{n}")

    def walk(task_id: str, events: list[TaskEvent]) -> None:
        for event in events:
            assert move(task_id, event).applied, event

    def refused_because(task_id: str) -> str:
        with db.transaction() as session:
            return session.scalar(select(StateEvent.payload).where(StateEvent.task_id == task_id)
                                  .order_by(StateEvent.id.desc()).limit(1))["refused"]

    queue = [E.VALIDATION_STARTED, E.VALIDATION_PASSED, E.QUEUED]
    # The state events: an unknown submit, then a detour the table allows, never reconciled.
    walk(detour, [*queue, E.DISPATCH_CLAIMED, E.SUBMIT_AMBIGUOUS, E.NEEDS_ATTENTION, E.PROVIDER_RUNNING,
                  E.RETRYABLE_FAILURE, E.RETRY_DUE])
    out = move(detour, E.DISPATCH_CLAIMED)
    assert (out.applied, out.status) == (False, "QUEUED")
    assert "outcome is unknown" in refused_because(detour)

    # The attempt rows: the events say found, but an attempt is still UNKNOWN.
    walk(attempt_open, [*queue, E.DISPATCH_CLAIMED, E.SUBMIT_AMBIGUOUS, E.PROVIDER_JOB_FOUND, E.RETRYABLE_FAILURE,
                        E.RETRY_DUE])
    with db.transaction() as session:
        session.add(Attempt(task_id=attempt_open, attempt_no=1, provider="emulator", model="m",
                            request_key=f"{attempt_open}-a1", request_fingerprint="0" * 64,
                            submit_state=sm.AttemptState.UNKNOWN.value))
    assert not move(attempt_open, E.DISPATCH_CLAIMED).applied
    with db.transaction() as session:
        session.execute(update(Attempt).where(Attempt.task_id == attempt_open)
                        .values(submit_state=sm.AttemptState.FAILED_BEFORE_ACCEPT.value))
    assert move(attempt_open, E.DISPATCH_CLAIMED).status == "DISPATCHING"

    # A cancel in REVIEW never fetches the paid video again; it ends the task.
    walk(reviewed, [*queue, E.DISPATCH_CLAIMED, E.PROVIDER_ACCEPTED, E.PROVIDER_SUCCEEDED, E.OUTPUT_PERSISTED,
                    E.REVIEW_REQUIRED, E.CANCEL_REQUESTED])
    out = move(reviewed, E.COMPLETION_WON)
    assert (out.applied, out.status) == (False, "CANCEL_REQUESTED")
    assert "paid for" in refused_because(reviewed)
    assert move(reviewed, E.CANCEL_CONFIRMED).status == "CANCELED"
