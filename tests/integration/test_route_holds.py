"""The route step's transaction and the holds of a task on the real Postgres (and the real emulator for a
stray): the route a task holds is its row's; it changes only with its reservation and only when no job of
the task may exist; every route change that costs more holds its own difference; settle closes every hold
of a run, review included; a duplicate job is accounted at the provider that made it. The gates' answers
(breakers) are the step's inputs here; tests/workflow/test_routing.py runs them with the real gates."""

from __future__ import annotations

import uuid
from decimal import Decimal

import pytest
from sqlalchemy import select, update
from stack_helpers import import_small
from temporalio.testing import ActivityEnvironment

from activities.ledger import LedgerActivities, held_for_video
from activities.poll import PollActivities
from activities.routing import RoutingActivities
from activities.submit import request_key
from adapters.providers import build_providers
from adapters.providers.base import GenerationRequest
from contracts.admission import BreakerMode
from contracts.messages import RouteRequest, SettleInput, StrayJobRef, TaskRef
from contracts.routing import Route, RouteFacts
from schema import queries
from schema.db import Database
from schema.ledger_check import check
from schema.models import Attempt, CreditEntry, StrayJob, Task
from schema.strays import book_stray

pytestmark = pytest.mark.integration

A = Route(provider="emulator", model="emu-motion-1")
B = Route(provider="runway", model="gen4_turbo")
C = Route(provider="kling", model="kling-v2-1")
FALLBACKS = ('fallbacks = [{ provider = "runway", model = "gen4_turbo" }, '
             '{ provider = "kling", model = "kling-v2-1" }]')


@pytest.fixture
def routed(stack, tmp_path):
    """One 2-s task (3 credits held on the emulator) whose fallbacks cost 4 (Runway) and 5 (Kling); the
    routing step on the stack's database with the providers' real adapters and these prices."""
    settings = stack.model_copy(update={"emulate_providers": True, "runway_prices": {"gen4_turbo": 2.0},
                                        "kling_prices": {"kling-v2-1": 2.5}})
    summary = import_small(stack, tmp_path / uuid.uuid4().hex[:8], [("R-1", "Vase", "Glass")],
                           template_extra=FALLBACKS)
    db = Database(stack.database_url)
    with db.transaction() as session:
        (task,) = queries.list_tasks(session, summary.import_id)
    ActivityEnvironment().run(LedgerActivities(db).reserve_credit, TaskRef(task_id=task.id))
    routing = RoutingActivities(db, None, build_providers(settings), plans=lambda *_: None)
    yield summary, db, task, routing
    ActivityEnvironment().run(LedgerActivities(db).settle, SettleInput(task_id=task.id, cost=0.0, reason="test"))
    with db.transaction() as session:  # its holds closed and its jobs accounted: the suite's ledger check
        session.execute(update(Task).where(Task.id == task.id, Task.status.not_in(["SUCCEEDED"]))
                        .values(status="CANCELED"))
        session.execute(update(Attempt).where(Attempt.task_id == task.id).values(submit_state="FAILED"))
        for stray in session.scalars(select(StrayJob).where(StrayJob.task_id == task.id, ~StrayJob.accounted)):
            book_stray(session, stray, Decimal(0), "test: none made")


def facts(*open_: Route) -> list[RouteFacts]:
    return [RouteFacts(route=r, price=0.0, breaker=BreakerMode.OPEN if r in open_ else BreakerMode.CLOSED)
            for r in (A, B, C)]


def take(routing: RoutingActivities, task: Task, attempt_no: int, facts_: list[RouteFacts], *,
         current: Route = A, job_may_exist: bool = False, take_: bool = True):
    req = RouteRequest(task_id=task.id, attempt_no=attempt_no, current=current, job_may_exist=job_may_exist,
                       take=take_)
    return routing._take(req, facts_, lock_model=False, duration_s=float(task.duration_s))


def row_route(db: Database, task_id: str) -> Route:
    with db.transaction() as session:
        task = session.get(Task, task_id)
        return Route(provider=task.provider, model=task.model)


def held(db: Database, task_id: str) -> Decimal:
    with db.transaction() as session:
        return held_for_video(session, task_id, 1)


def test_two_route_changes_before_one_attempt_hold_each_difference(routed):
    """A -> B (A's breaker opened) tops up 1; B's breaker opens before the attempt is made: B -> C tops up
    1 more for the same attempt. The task holds C's price, not B's."""
    _, db, task, routing = routed
    assert take(routing, task, 1, facts(A)).route == B
    assert take(routing, task, 1, facts(A, B), current=B).route == C
    assert row_route(db, task.id) == C and held(db, task.id) == Decimal(5)
    with db.transaction() as session:
        keys = session.scalars(select(CreditEntry.business_key).where(
            CreditEntry.task_id == task.id, CreditEntry.entry_type == "RESERVE").order_by(CreditEntry.id)).all()
    assert keys == [f"reserve:{task.id}", f"reserve:{task.id}:route:s1", f"reserve:{task.id}:route:s2"]
    again = take(routing, task, 1, facts(A, B), current=C)  # the step run again after its commit
    assert again.route == C and held(db, task.id) == Decimal(5)


def test_no_usable_route_keeps_the_route_the_row_holds_whatever_the_run_believes(routed):
    """On the fallback, every breaker open: the choice is the row's route (the run said it was on A)."""
    _, db, task, routing = routed
    take(routing, task, 1, facts(A))
    choice = take(routing, task, 1, facts(A, B, C), current=A)
    assert (choice.route, choice.waits) == (B, True) and row_route(db, task.id) == B


@pytest.mark.parametrize("evidence", ["unknown_attempt", "open_stray"])
def test_no_route_change_while_a_job_of_the_task_may_exist(routed, evidence):
    """The task is on B; an attempt there whose outcome is unknown, or a duplicate not yet accounted,
    pins it to B though B's breaker is open and A is healthy, even when the run does not say so."""
    _, db, task, routing = routed
    take(routing, task, 1, facts(A))
    with db.transaction() as session:
        if evidence == "unknown_attempt":
            session.add(Attempt(task_id=task.id, attempt_no=1, provider=B.provider, model=B.model,
                                request_key=request_key(task.id, 1), submit_state="UNKNOWN",
                                request_fingerprint="0" * 64))
        else:
            session.add(StrayJob(task_id=task.id, attempt_no=1, provider=B.provider,
                                 provider_job_id=f"job-{uuid.uuid4().hex[:8]}", found_by="reconcile"))
    for take_ in (False, True):
        choice = take(routing, task, 2, facts(B), current=B, take_=take_)
        assert (choice.route, choice.pinned) == (B, True)
    assert row_route(db, task.id) == B


def test_holds_made_after_review_closed_the_reservation_are_released_by_the_last_settle(routed):
    """Review closed the reservation (settled 2 of the 4 held after A -> B). Then a regeneration accepts a
    duplicate risk (its estimate held) and takes a dearer route (its difference held): the final settle
    books the regeneration's cost and releases both holds; `ledger check` finds nothing."""
    summary, db, task, routing = routed
    ledger, env = LedgerActivities(db), ActivityEnvironment()
    take(routing, task, 1, facts(A))
    env.run(ledger.settle, SettleInput(task_id=task.id, attempt_no=1, cost=2.0, reason="review_required"))
    env.run(ledger.reserve_credit, TaskRef(task_id=task.id, hold_for_attempt=2, hold="risk"))
    take(routing, task, 3, facts(A, B), current=B)  # C: 5 > the 4 held for the video
    closed = env.run(ledger.settle, SettleInput(task_id=task.id, attempt_no=3, cost=4.5, after_review=True))
    assert closed.reserved == closed.settled + closed.released == 3 + 1 + 3 + 1
    assert closed.adjusted == 4.5
    with db.transaction() as session:
        session.execute(update(Task).where(Task.id == task.id).values(status="SUCCEEDED"))
        findings = check(session, summary.import_id)
    assert [v for v in findings.violations if v.task_id == task.id] == []


def test_an_accepted_risk_after_a_checks_regeneration_holds_its_own_estimate(routed):
    """Attempt 2 was a checks regeneration (its estimate held); attempt 2's submit then stayed unknown and a
    person accepted the risk: a second hold, under a key of its own."""
    _, db, task, _ = routed
    ledger, env = LedgerActivities(db), ActivityEnvironment()
    env.run(ledger.reserve_credit, TaskRef(task_id=task.id, hold_for_attempt=2))
    risk = env.run(ledger.reserve_credit, TaskRef(task_id=task.id, hold_for_attempt=2, hold="risk"))
    assert risk.reserved == 3 * 3


def test_a_duplicate_is_accounted_at_the_provider_that_made_it_after_a_route_change(routed, stack):
    """The emulator made a duplicate of attempt 1; the task has since moved to Runway. Its accounting asks
    the emulator (cancel, status, cost) and books it there, not at the task's current provider."""
    _, db, task, routing = routed
    emulator = build_providers(stack)["emulator"]
    job = emulator.submit(GenerationRequest(request_key=f"{request_key(task.id, 1)}-dup", model=A.model,
                                            prompt="p", aspect_ratio="9:16", duration_s=1.0)).job_id
    with db.transaction() as session:
        session.add(Attempt(task_id=task.id, attempt_no=1, provider=A.provider, model=A.model,
                            request_key=request_key(task.id, 1), submit_state="FAILED",
                            request_fingerprint="0" * 64))
        session.add(StrayJob(task_id=task.id, attempt_no=1, provider=A.provider, provider_job_id=job,
                             found_by="reconcile"))
    with db.transaction() as session:
        session.execute(update(Task).where(Task.id == task.id).values(provider=B.provider, model=B.model))
    polls = PollActivities(db, build_providers(stack.model_copy(update={"emulate_providers": True})))
    env = ActivityEnvironment()
    for _ in range(60):  # retried by policy until the job is terminal (a cancel ends it within seconds)
        try:
            accounted = env.run(polls.account_stray_job, StrayJobRef(task_id=task.id, attempt_no=1, job_id=job))
            break
        except Exception as exc:  # noqa: BLE001 - the activity asks to be retried until the job ends
            assert "still" in str(exc), exc
    else:
        raise AssertionError("the duplicate never ended")
    with db.transaction() as session:
        stray = session.scalar(select(StrayJob).where(StrayJob.provider_job_id == job))
        assert stray.accounted and stray.provider == A.provider
        (adjustment,) = session.scalars(select(CreditEntry).where(CreditEntry.task_id == task.id,
                                                                  CreditEntry.provider_job_id == job)).all()
    assert float(adjustment.amount) == accounted.cost
