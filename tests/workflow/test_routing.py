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
from test_money_paths import gates, occupy, waiting_in_line
from test_provider_breaker import assert_all_succeeded_once, opened_at, start_all, until_gate
from workflow_fakes import SUCCEEDED, ending, outage, resolve, unknown, until

from config.defaults import BreakerPolicy
from contracts import workflow_api as api
from contracts.admission import BreakerMode, SlotRelease
from contracts.messages import ReconcileOutcome, ReconcileResult, ResolveAction
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


async def test_no_usable_route_on_a_fallback_waits_on_the_route_the_task_holds(own_env):
    """The task left the primary for the fallback when the primary's breaker opened; then the fallback's opens
    too. No route is usable: the task waits where its row says it is (the fallback), so every submit goes to the
    provider whose gate granted its slot, and none to a provider whose breaker is open at that moment; once a
    breaker lets a probe through the task submits there. One paid job each, ledgers balanced."""
    policy = BreakerPolicy(failures=1, failure_ratio=0.5, window_s=30, cooldown_s=300)
    fleet = Fleet(limit=2, job_s=60.0, breaker=policy, routes=ROUTES)
    async with running_fleet(own_env, fleet) as run:
        await start_all(own_env, run)
        await until(own_env, lambda: len(fleet.jobs) == 2, step_s=1)
        fleet.failing, fleet.failing_on = "http_503", PROVIDER
        await until_gate(own_env, run, lambda g: g.breaker is BreakerMode.OPEN)
        await until(own_env, lambda: len(sent_on(fleet, FALLBACK)) >= 1, step_s=1)
        fleet.failing_on = FALLBACK  # the fallback fails too: its breaker opens, the primary's is still open
        fallback_gate = own_env.client.get_workflow_handle(api.gate_id(FALLBACK, run.queue))
        await until(own_env, lambda: fleet.submits[-1][2] != "accepted", step_s=1)
        for _ in range(300):
            if (await snapshot(fallback_gate)).breaker is BreakerMode.OPEN:
                break
            await own_env.sleep(1)
        fleet.failing = None  # both come back; each breaker's probe closes it after its cool-down
        await finish(own_env, fleet, run, step_s=20)
        await record(run.handles[-1], ROUTE_FALLBACK, "no_usable_route_waits_on_the_fallback_it_holds")
    assert {t for t, _, _ in sent_on(fleet, FALLBACK)}, "some tasks went to the fallback"
    for task_id, provider, gate_id, mode in fleet.sent_under:
        assert gate_id == api.gate_id(provider, run.queue), f"{task_id} sent to {provider} under a slot of {gate_id}"
        assert mode is not BreakerMode.OPEN, f"{task_id} sent to {provider} while its breaker was open"
    assert_all_succeeded_once(fleet, TASKS)


async def test_a_retry_at_reconcile_stays_in_its_gates_line_and_never_follows_a_job_without_a_slot(env, world,
                                                                                                   run_world):
    """An unknown submit whose reconcile cannot ask waits for a person; its slot goes back after one job
    deadline. `resolve --retry` asks the gate again: the task waits in line (another task holds the only slot)
    and, though its primary's breaker is open and a fallback is healthy, never leaves the line for it (a job of
    its may exist on the primary): it reconciles and follows the job it finds only once it holds a slot."""
    world.routes, world.limit = ROUTES, 1
    world.submits, world.reconciles = [unknown()], [outage("list API down")]
    handle = await run_world()
    await until(env, lambda: world.status is S.NEEDS_ATTENTION)
    world.breakers[PROVIDER] = BreakerMode.OPEN
    await env.sleep(world.deadline_s + 60)  # the slot is given back one job deadline after the unknown submit
    gate, _ = await gates(env, handle)
    someone = await occupy(env, gate)
    asked = len(world.called("reconcile_submit"))
    world.reconciles, world.polls = [ReconcileResult(outcome=ReconcileOutcome.FOUND, job_id="job-1")], [SUCCEEDED]
    await resolve(handle, ResolveAction.RETRY, "the list API is back")
    await waiting_in_line(env, gate)
    await env.sleep(600)  # ten route looks' worth of waiting
    assert (await snapshot(gate)).waiting == 1, "the task left its gate's line"
    assert len(world.called("reconcile_submit")) == asked and world.route in (None, ROUTES[0])
    await gate.signal(api.SIGNAL_GATE_RELEASE, SlotRelease(workflow_id=someone.workflow_id, token=1))
    assert await ending(handle) == "completed"
    assert [r.provider for r in world.called("request_slot") if r.provider in (PROVIDER, FALLBACK)] \
        and world.called("submit") and len(world.called("submit")) == 1
    await record(handle, ROUTE_FALLBACK, "retry_at_reconcile_keeps_its_route_and_line")
