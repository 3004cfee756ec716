"""The prepare step (lean-path-v1) on the real stack (Temporal's ActivityEnvironment, the worker's own
wiring): a valid task is validated, its estimate held and it is QUEUED with its deadline in one step; a
repeat writes nothing new and answers the same; a tenant without credit for it gets an answer, nothing
held and the task left VALIDATING; a task that already ended is found there, nothing held."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime

import pytest
from sqlalchemy import select
from stack_helpers import import_small
from temporalio.testing import ActivityEnvironment

from activities import build_activities
from activities.ledger import LedgerActivities
from contracts.messages import SettleInput, TaskRef, TransitionInput
from contracts.task import TaskEvent as E
from contracts.task import TaskStatus as S
from schema import queries
from schema.db import Database
from schema.models import CreditEntry, Task

pytestmark = pytest.mark.integration


def _ref(task_id: str) -> TaskRef:
    return TaskRef(task_id=task_id, moves=[
        TransitionInput(task_id=task_id, event=event, source_event_id=f"{task_id}:{n}:{event.value}")
        for n, event in enumerate((E.VALIDATION_STARTED, E.VALIDATION_PASSED, E.QUEUED), start=1)])


def _prepare(stack):  # noqa: ANN001, ANN202
    return next(a for a in build_activities(stack, None) if a.__name__ == "prepare_task")


def test_prepare_holds_and_queues_once_and_answers_a_short_credit(stack, tmp_path):
    tenant = stack.model_copy(update={"tenant": f"prep-{uuid.uuid4().hex[:8]}", "tenant_credit_limit": 5})
    summary = import_small(tenant, tmp_path, [("P-1", "Lamp", "A lamp")], ratios=("9:16", "16:9"))  # 3 credits each
    db = Database(stack.database_url)
    with db.transaction() as session:
        first, second = (t.id for t in queries.list_tasks(session, summary.import_id))
    prepare, env = _prepare(stack), ActivityEnvironment()
    env.info = dataclasses.replace(env.info, scheduled_time=datetime(2026, 1, 1, tzinfo=UTC))

    done = env.run(prepare, _ref(first))
    assert done.ok and done.credit_short is None, done.reason
    assert [(m.applied, m.status) for m in done.moved] == [(True, S.VALIDATING), (True, S.QUOTA_RESERVED),
                                                            (True, S.QUEUED)]
    assert done.task_deadline_at is not None and done.task_deadline_at.year == 2026
    again = env.run(prepare, _ref(first))  # a retried step
    assert again.task_deadline_at == done.task_deadline_at and [m.status for m in again.moved] == [S.QUEUED] * 3

    short = env.run(prepare, _ref(second))  # 5 - 3 = 2 left, it needs 3
    assert short.ok and short.credit_short is not None and "needs 3" in short.credit_short
    assert [(m.applied, m.status) for m in short.moved] == [(True, S.VALIDATING)] and short.task_deadline_at is None
    with db.transaction() as session:
        holds = session.execute(select(CreditEntry.task_id, CreditEntry.entry_type)
                                .where(CreditEntry.task_id.in_([first, second]))).all()
        statuses = (session.get(Task, first).status, session.get(Task, second).status)
    assert [tuple(h) for h in holds] == [(first, "RESERVE")] and statuses == ("QUEUED", "VALIDATING")
    released = env.run(LedgerActivities(db).settle, SettleInput(task_id=first, cost=0.0, reason="test over"))
    assert released.released == 3.0  # no hold left behind for the suite's ledger check


def test_a_task_that_ended_is_found_by_prepare_and_holds_nothing(stack, tmp_path):
    tenant = stack.model_copy(update={"tenant": f"prep-end-{uuid.uuid4().hex[:8]}", "tenant_credit_limit": 10})
    summary = import_small(tenant, tmp_path, [("P-2", "Vase", "A vase")])
    db = Database(stack.database_url)
    with db.transaction() as session:
        (task,) = queries.list_tasks(session, summary.import_id)
    from control.cancel import cancel_unstarted

    cancel_unstarted(db, task.id, "before its run")
    done = ActivityEnvironment().run(_prepare(stack), _ref(task.id))
    assert [(m.applied, m.status) for m in done.moved] == [(False, S.CANCELED)]
    with db.transaction() as session:
        assert session.scalars(select(CreditEntry).where(CreditEntry.task_id == task.id)).all() == []
