"""reserve_credit and settle on real Postgres (Temporal's ActivityEnvironment): one row per business
key however often a step runs, the tenant's credit checked, the balance as stored."""

from __future__ import annotations

import uuid
from decimal import Decimal

import pytest
from sqlalchemy import select, update
from stack_helpers import import_small
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.errors import INSUFFICIENT_CREDIT
from activities.ledger import LedgerActivities
from activities.tasks import TaskActivities
from contracts.messages import SettleInput, TaskRef, TransitionInput
from contracts.task import TaskEvent as E
from contracts.task import TaskStatus as S
from schema import queries
from schema.db import Database
from schema.models import Attempt, CreditEntry, StateEvent, Task

pytestmark = pytest.mark.integration


def two_tasks(stack, tmp_path, tenant_prefix: str, *, credit_limit: int):  # noqa: ANN201
    """A tenant of its own with `credit_limit` credits and an import of one product in two ratios:
    the import's summary, the database and the two tasks' ids."""
    tenant = stack.model_copy(update={"tenant": f"{tenant_prefix}-{uuid.uuid4().hex[:8]}",
                                      "tenant_credit_limit": credit_limit})
    summary = import_small(tenant, tmp_path, [("L-1", "Lamp", "A lamp")], ratios=("9:16", "16:9"))
    db = Database(stack.database_url)
    with db.transaction() as session:
        return summary, db, tuple(t.id for t in queries.list_tasks(session, summary.import_id))


def test_reserve_settle_once_per_key_within_the_tenant_credit(stack, tmp_path):
    summary, db, (first, second) = two_tasks(stack, tmp_path, "ledger", credit_limit=5)  # 3 credits each
    ledger, env = LedgerActivities(db), ActivityEnvironment()

    for _ in range(2):  # a repeated reservation adds nothing
        reserved = env.run(ledger.reserve_credit, TaskRef(task_id=first))
        assert (reserved.reserved, reserved.settled, reserved.released) == (3.0, 0.0, 0.0)
    with pytest.raises(ApplicationError) as refused:  # 5 - 3 = 2 left, the second needs 3
        env.run(ledger.reserve_credit, TaskRef(task_id=second))
    assert refused.value.type == INSUFFICIENT_CREDIT and refused.value.non_retryable

    for _ in range(2):  # the provider charged 4: settle 3, adjustment 1, nothing released; once
        settled = env.run(ledger.settle, SettleInput(task_id=first, attempt_no=1, cost=4.0))
        assert (settled.reserved, settled.settled, settled.released, settled.adjusted) == (3.0, 3.0, 0.0, 1.0)
    with db.transaction() as session:
        rows = session.execute(select(CreditEntry.entry_type, CreditEntry.amount)
                               .where(CreditEntry.task_id == first).order_by(CreditEntry.id)).all()
    assert [(t, a) for t, a in rows] == [("RESERVE", Decimal(3)), ("SETTLE", Decimal(3)), ("ADJUSTMENT", Decimal(1))]
    with pytest.raises(ApplicationError):  # spent 4 of 5: still no room for 3
        env.run(ledger.reserve_credit, TaskRef(task_id=second))
    nothing = env.run(ledger.settle, SettleInput(task_id=second, attempt_no=1, cost=0.0))
    assert (nothing.reserved, nothing.settled, nothing.released) == (0.0, 0.0, 0.0)


def test_reserve_commits_the_moves_it_carries_with_the_hold_and_none_without_it(stack, tmp_path):
    """transition-in-work-v1: the task becomes QUEUED in the transaction that holds its credit; a
    refused reservation moves nothing, and a repeat applies nothing twice."""
    _, db, (first, second) = two_tasks(stack, tmp_path, "moves", credit_limit=5)  # 3 credits each
    ledger, tasks, env = LedgerActivities(db), TaskActivities(db, None, {}, None), ActivityEnvironment()  # type: ignore[arg-type]

    def moves(task_id: str) -> list[TransitionInput]:
        env.run(tasks.record_transition, TransitionInput(task_id=task_id, event=E.VALIDATION_STARTED,
                                                         source_event_id=f"{task_id}:1:validation_started"))
        return [TransitionInput(task_id=task_id, event=event, source_event_id=f"{task_id}:{n}:{event.value}")
                for n, event in ((2, E.VALIDATION_PASSED), (3, E.QUEUED))]

    reserved = env.run(ledger.reserve_credit, TaskRef(task_id=first, moves=moves(first)))
    assert [(m.applied, m.status, m.version) for m in reserved.moved] == [(True, S.QUOTA_RESERVED, 2),
                                                                          (True, S.QUEUED, 3)]
    again = env.run(ledger.reserve_credit, TaskRef(task_id=first, moves=moves(first)))  # a retried activity
    assert [(m.applied, m.status, m.version) for m in again.moved] == [(True, S.QUEUED, 3)] * 2
    with pytest.raises(ApplicationError):  # 2 credits left, the second needs 3
        env.run(ledger.reserve_credit, TaskRef(task_id=second, moves=moves(second)))
    with db.transaction() as session:
        assert (session.get(Task, first).status, session.get(Task, second).status) == ("QUEUED", "VALIDATING")
        events = session.scalars(select(StateEvent.event).where(StateEvent.task_id == first)
                                 .order_by(StateEvent.id)).all()
    assert events[-3:] == ["validation_started", "validation_passed", "queued"]
    released = env.run(ledger.settle, SettleInput(task_id=first, cost=0.0, reason="test over"))  # no hold left behind
    assert released.released == 3.0


def test_settle_commits_the_ending_with_the_rows_that_close_the_ledger(stack, tmp_path):
    """transition-in-work-v2: the move that ends the task is committed with SETTLE/RELEASE; a repeat of
    the step writes neither twice."""
    tenant = stack.model_copy(update={"tenant": f"ending-{uuid.uuid4().hex[:8]}", "tenant_credit_limit": 10})
    summary = import_small(tenant, tmp_path, [("E-1", "Vase", "A vase")])
    db = Database(stack.database_url)
    with db.transaction() as session:
        (task,) = queries.list_tasks(session, summary.import_id)
    ledger, tasks, env = LedgerActivities(db), TaskActivities(db, None, {}, None), ActivityEnvironment()  # type: ignore[arg-type]
    env.run(tasks.record_transition, TransitionInput(task_id=task.id, event=E.VALIDATION_STARTED,
                                                     source_event_id=f"{task.id}:1:validation_started"))
    env.run(ledger.reserve_credit, TaskRef(task_id=task.id))
    ending = TransitionInput(task_id=task.id, event=E.FINAL_FAILURE, source_event_id=f"{task.id}:2:final_failure",
                             error="provider job FAILED", error_class="moderation")
    closed = env.run(ledger.settle, SettleInput(task_id=task.id, cost=0.0, reason="final_failure", moves=[ending]))
    assert closed.released == closed.reserved > 0
    assert [(m.applied, m.status) for m in closed.moved] == [(True, S.FAILED_FINAL)]
    again = env.run(ledger.settle, SettleInput(task_id=task.id, cost=0.0, reason="final_failure", moves=[ending]))
    assert again.released == closed.released and [(m.applied, m.status) for m in again.moved] == [
        (True, S.FAILED_FINAL)]
    with db.transaction() as session:
        found = session.get(Task, task.id)
        assert (found.status, found.last_error_class) == ("FAILED_FINAL", "moderation")
        kinds = session.scalars(select(CreditEntry.entry_type).where(CreditEntry.task_id == task.id)).all()
    assert sorted(kinds) == ["RELEASE", "RESERVE"]


def test_a_regeneration_holds_its_estimate_and_settle_closes_both_holds(stack, tmp_path):
    """checks-gate-success-v1: the regeneration of a video that failed its checks holds one more estimate
    (a RESERVE naming the attempt, within the tenant's credit); settle closes both holds; ledger check ok."""
    from schema.ledger_check import check

    summary, db, (first, second) = two_tasks(stack, tmp_path, "regen", credit_limit=8)  # 3 credits each
    ledger, env = LedgerActivities(db), ActivityEnvironment()
    env.run(ledger.reserve_credit, TaskRef(task_id=first))
    for _ in range(2):  # once per attempt however often the step runs
        held = env.run(ledger.reserve_credit, TaskRef(task_id=first, hold_for_attempt=2))
        assert held.reserved == 6.0
    with pytest.raises(ApplicationError) as refused:  # 8 - 6 = 2 left: no room for the other task
        env.run(ledger.reserve_credit, TaskRef(task_id=second))
    assert refused.value.type == INSUFFICIENT_CREDIT
    settled = env.run(ledger.settle, SettleInput(task_id=first, attempt_no=2, cost=5.0))  # both jobs
    assert (settled.reserved, settled.settled, settled.released, settled.adjusted) == (6.0, 5.0, 1.0, 0.0)
    with db.transaction() as session:
        rows = session.execute(select(CreditEntry.entry_type, CreditEntry.amount, CreditEntry.attempt_no)
                               .where(CreditEntry.task_id == first).order_by(CreditEntry.id)).all()
        session.execute(update(Task).where(Task.id == first).values(status="SUCCEEDED"))
    assert [tuple(r) for r in rows] == [("RESERVE", Decimal(3), None), ("RESERVE", Decimal(3), 2),
                                        ("SETTLE", Decimal(5), 2), ("RELEASE", Decimal(1), 2)]
    with db.transaction() as session:
        findings = check(session, summary.import_id)
    assert [v for v in findings.violations if v.task_id == first] == []


@pytest.mark.parametrize("listed", [False, True], ids=["provider-cannot-list", "provider-lists"])
def test_an_accepted_risk_at_a_provider_that_cannot_list_is_charged_not_released(stack, tmp_path, listed):
    """Attempt 1's submit stayed unknown; a person accepted the duplicate risk (its estimate held,
    the attempt ABANDONED) and attempt 2 succeeded for 2 credits. Where the backstop can list the
    provider's jobs, the hold is released with the task (a first job found later is booked then);
    where it cannot, nothing would ever find that job: the hold is charged as an ADJUSTMENT naming
    attempt 1, once however often settle runs, and `ledger check` stays ok."""
    from schema.ledger_check import check

    summary = import_small(stack, tmp_path, [("K-1", "Kite", "A kite")])
    db = Database(stack.database_url)
    with db.transaction() as session:
        (task,) = queries.list_tasks(session, summary.import_id)  # 3 credits
        for n, state, job in ((1, "ABANDONED", None), (2, "SUCCEEDED", f"job-{uuid.uuid4().hex[:8]}")):
            session.add(Attempt(task_id=task.id, attempt_no=n, provider=task.provider, model=task.model,
                                request_key=f"{task.id}-a{n}", provider_job_id=job, submit_state=state,
                                request_fingerprint="0" * 64))
    ledger, env = LedgerActivities(db, [] if listed else [task.provider]), ActivityEnvironment()
    env.run(ledger.reserve_credit, TaskRef(task_id=task.id))
    env.run(ledger.reserve_credit, TaskRef(task_id=task.id, hold_for_attempt=1))
    for _ in range(2):
        settled = env.run(ledger.settle, SettleInput(task_id=task.id, attempt_no=2, cost=2.0))
    with db.transaction() as session:
        rows = session.execute(select(CreditEntry.entry_type, CreditEntry.amount, CreditEntry.attempt_no)
                               .where(CreditEntry.task_id == task.id).order_by(CreditEntry.id)).all()
        session.execute(update(Task).where(Task.id == task.id).values(status="SUCCEEDED"))
    business = [("RESERVE", Decimal(3), None), ("RESERVE", Decimal(3), 1), ("SETTLE", Decimal(2), 2),
                ("RELEASE", Decimal(4), 2)]
    assert [tuple(r) for r in rows] == business + ([] if listed else [("ADJUSTMENT", Decimal(3), 1)])
    assert settled.adjusted == (0.0 if listed else 3.0)
    with db.transaction() as session:
        assert [v for v in check(session, summary.import_id).violations if v.task_id == task.id] == []
