"""task_store.transition on real Postgres: a new event moves the task once, the same source event
again is answered from what was recorded, an event the table refuses is kept for audit only."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from stack_helpers import import_small

from schema import queries
from schema import state_machine as sm
from schema.db import Database
from schema.models import StateEvent
from schema.task_store import TaskNotFound, transition

pytestmark = pytest.mark.integration
E = sm.TaskEvent


def test_transition_once_per_source_event(stack, tmp_path):
    summary = import_small(stack, tmp_path, [("TS-1", "Lamp", "A lamp")])
    db = Database(stack.database_url)
    with db.transaction() as session:
        (task,) = queries.list_tasks(session, summary.import_id)

    def move(event: sm.TaskEvent, source_event_id: str):
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
