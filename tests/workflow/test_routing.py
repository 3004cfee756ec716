"""Routing with fallback on the time-skipping server (route-fallback-v1): tasks whose template names a
fallback route leave a provider whose breaker opened (those waiting in its line too), `lock_model`
keeps them on the primary, and a task whose submit's outcome is unknown never submits on another route
before its own provider said whether the job exists. The gates and their breakers are the real ones.

`REELQUEUE_RECORD_HISTORIES=1` records the histories into tests/fixtures/histories/generation/route-fallback-v1/.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from fleet_fakes import PROVIDER, Fleet, running_fleet
from histories import record
from test_admission_bounds import finish, snapshot
from test_provider_breaker import assert_all_succeeded_once, opened_at, start_all, until_gate
from workflow_fakes import until

from config.defaults import BreakerPolicy
from contracts.admission import BreakerMode
from contracts.routing import Route
from contracts.task import TaskStatus as S
from workflows.generation.patches import ROUTE_FALLBACK

POLICY = BreakerPolicy(failures=3, failure_ratio=0.5, window_s=60, cooldown_s=300)
TASKS = [f"t{i}" for i in range(6)]
FALLBACK = "alt"
ROUTES = [Route(provider=PROVIDER, model="m"), Route(provider=FALLBACK, model="m2")]


def sent_on(fleet: Fleet, provider: str, after: datetime | None = None) -> list[tuple[str, datetime, str]]:
    return [s for s in fleet.sent_on if s[2] == provider and (after is None or s[1] >= after)]


async def test_tasks_leave_a_provider_whose_breaker_opened_for_their_fallback_route(own_env):
    """Limit 2: two jobs run on the primary while four tasks wait in its line; then its submits fail and
    the first failure opens its breaker. The refused task and the three still in the primary's line (they
    look at their routes while waiting) go to the fallback: one paid job each, ledgers balanced."""
    policy = BreakerPolicy(failures=1, failure_ratio=0.5, window_s=30, cooldown_s=300)
    fleet = Fleet(limit=2, job_s=60.0, breaker=policy, routes=ROUTES)
    async with running_fleet(own_env, fleet) as run:
        await start_all(own_env, run)
        await until(own_env, lambda: len(fleet.jobs) == 2, step_s=1)
        fleet.failing, fleet.failing_on = "http_503", PROVIDER
        opened = await until_gate(own_env, run, lambda g: g.breaker is BreakerMode.OPEN)
        await finish(own_env, fleet, run, step_s=20)
        primary = await snapshot(run.gate)
        await record(run.handles[2], ROUTE_FALLBACK, "refused_then_fallback_route")
        await record(run.handles[-1], ROUTE_FALLBACK, "left_the_line_for_the_fallback_route")
    on_primary = sent_on(fleet, PROVIDER)
    assert len(on_primary) == 3 and sent_on(fleet, PROVIDER, after=opened_at(opened, policy)) == []
    moved = [t for t in TASKS if fleet.route_of(t) == ROUTES[1]]
    assert set(moved) == set(TASKS[2:]) and {t for t, _, _ in sent_on(fleet, FALLBACK)} == set(moved)
    assert_all_succeeded_once(fleet, TASKS)
    assert primary.in_use == 0 and primary.waiting == 0  # those that left its line left nothing behind
    # t3-t5 waited in the primary's line from their start until after it opened (nothing was sent for them
    # there); each left it after a look at its routes (which takes nothing), then took the fallback.
    since = opened_at(opened, policy)
    for task in TASKS[3:]:
        looked = min(at for t, at, take in fleet.routed if t == task and not take and at >= since)
        assert min(at for t, at, _ in sent_on(fleet, FALLBACK) if t == task) > looked


async def test_lock_model_keeps_every_task_on_its_primary_route_through_the_outage(own_env):
    fleet = Fleet(limit=2, job_s=60.0, breaker=POLICY, failing="http_503", failing_on=PROVIDER, routes=ROUTES,
                  lock_model=True)
    async with running_fleet(own_env, fleet) as run:
        await start_all(own_env, run)
        await until_gate(own_env, run, lambda g: g.breaker is BreakerMode.OPEN)
        fleet.failing = None  # the primary comes back; its probe closes the breaker
        await finish(own_env, fleet, run, step_s=20)
        await record(run.handles[-1], ROUTE_FALLBACK, "lock_model_waits_for_the_primary")
    assert sent_on(fleet, FALLBACK) == []
    assert {t for t, _, _ in fleet.sent_on} == set(TASKS)
    assert_all_succeeded_once(fleet, TASKS)


async def test_an_unknown_submit_is_reconciled_on_its_route_before_any_submit_on_another(own_env):
    """Submits on the primary time out (no job made) and open its breaker at the first failure: each
    such task asks its own provider first, and submits on the fallback only after the answer "no job"."""
    policy = BreakerPolicy(failures=1, failure_ratio=0.5, window_s=60, cooldown_s=300)
    fleet = Fleet(limit=2, job_s=60.0, breaker=policy, failing="timeout", failing_on=PROVIDER, routes=ROUTES)
    async with running_fleet(own_env, fleet) as run:
        await start_all(own_env, run)
        await until_gate(own_env, run, lambda g: g.breaker is BreakerMode.OPEN)
        await finish(own_env, fleet, run, step_s=20)
        await record(run.handles[0], ROUTE_FALLBACK, "unknown_submit_reconciled_then_fallback")
    timed_out = [(t, at) for t, at, p in fleet.sent_on if p == PROVIDER]
    assert timed_out
    for task_id, at in timed_out:
        absent_at = min(r for t, r in fleet.reconciled if t == task_id and r >= at)
        later = [s for t, s, p in fleet.sent_on if t == task_id and p == FALLBACK]
        assert later and min(later) >= absent_at  # the fallback only after its own provider's answer
    assert_all_succeeded_once(fleet, TASKS)


async def test_a_job_an_unknown_submit_made_is_followed_on_its_route_and_nothing_goes_elsewhere(own_env):
    """The submit timed out but made the job: the reconcile finds it and the task follows it to the end on
    the primary; it never submits on the fallback, though the primary's breaker is open."""
    policy = BreakerPolicy(failures=1, failure_ratio=0.5, window_s=60, cooldown_s=300)
    fleet = Fleet(limit=1, job_s=60.0, breaker=policy, failing="timeout_created", failing_on=PROVIDER,
                  routes=ROUTES)
    async with running_fleet(own_env, fleet) as run:
        await run.start("t0")
        opened = await until_gate(own_env, run, lambda g: g.breaker is BreakerMode.OPEN)
        await finish(own_env, fleet, run, step_s=20)
        await record(run.handles[0], ROUTE_FALLBACK, "unknown_submit_found_stays_on_its_route")
    assert opened.breaker is BreakerMode.OPEN
    assert [p for _, _, p in fleet.sent_on] == [PROVIDER]
    assert fleet.status["t0"] is S.SUCCEEDED and fleet.jobs_of("t0") == 1 and fleet.balanced("t0")
    assert fleet.reconciled and fleet.reconciled[0][1] - fleet.sent_on[0][1] < timedelta(minutes=5)
