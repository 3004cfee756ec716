"""Long waits for a slot on the time-skipping server (route-look-v1, long-wait-spacing-v1): a task that waits
hours in its gates' lines grows its history by its looks at its routes and its re-asks of its gate. For its
first hour it looks as route-look-v1 spaces them (every minute while a route is unhealthy, doubling to ten
minutes while all are healthy); once it has waited LONG_WAIT it looks every LONG_LOOK_EVERY and asks again every
LONG_REASK_EVERY, whatever its routes' health, so a wait as long as task_hours allows (720) stays far below
the server's 51,200-event limit. The gates and their breakers are the real ones.

`REELQUEUE_RECORD_HISTORIES=1` records the histories into tests/fixtures/histories/generation/long-wait-spacing-v1/.
"""

from __future__ import annotations

import contextlib

from fleet_fakes import PROVIDER, Fleet, FleetRun, running_fleet
from histories import history_lengths, record
from server_clock import skip_hours
from temporalio.client import WorkflowHandle
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from test_admission_bounds import snapshot
from workflow_fakes import until

from config.defaults import BreakerPolicy
from contracts import workflow_api as api
from contracts.admission import BreakerMode
from contracts.routing import Route
from workflows.generation.patches import LONG_WAIT_SPACING

FALLBACK = "alt"
ROUTES = [Route(provider=PROVIDER, model="m"), Route(provider=FALLBACK, model="m2")]
FIRST_HOUR_EVENTS = 100  # route-look-v1: a waiting task's first hour at a healthy provider with fallbacks (was ~960)
# long-wait-spacing-v1, after the first hour: three looks (6 events each) and a re-ask (5) every 40 minutes with
# fallbacks, a re-ask (10) every 30 without: ~26 and ~20 an hour; at 32 an hour a 720-hour wait makes < 23,100
LONG_WAIT_EVENTS_PER_HOUR = 32


async def waiting_behind_one_job(env: WorkflowEnvironment, fleet: Fleet, run: FleetRun,
                                 count: int) -> list[WorkflowHandle]:
    """Limit 1, its slot held by one job longer than the test: `count` tasks wait in the provider's line."""
    await run.start("first")
    await until(env, lambda: len(fleet.jobs) == 1, step_s=1)
    handles = [await run.start(f"w{i:02d}") for i in range(count)]
    await env.sleep(300)  # each has asked and waits: what its history grows by from here is its waiting
    return handles


async def until_open(env: WorkflowEnvironment, gate: WorkflowHandle) -> None:
    """Let (skipped) time pass until the gate runs and its breaker is open."""
    for _ in range(600):
        with contextlib.suppress(RPCError):
            if (await snapshot(gate)).breaker is BreakerMode.OPEN:
                return
        await env.sleep(1)
    raise AssertionError(f"{gate.id}'s breaker never opened")


async def growth_per_hour(env: WorkflowEnvironment, handles: list[WorkflowHandle], first: float,
                          then: float) -> tuple[list[float], list[float]]:
    """Each history's growth an hour over the wait's first `first` hours, then over the `then` hours after."""
    start = await history_lengths(handles)
    await skip_hours(env, first)
    middle = await history_lengths(handles)
    await skip_hours(env, then)
    end = await history_lengths(handles)
    return ([(b - a) / first for a, b in zip(start, middle, strict=True)],
            [(b - a) / then for a, b in zip(middle, end, strict=True)])


async def test_tasks_waiting_hours_with_fallbacks_keep_their_histories_small(own_env):
    """Twenty tasks with a fallback route wait six hours in a healthy provider's line: their first hour's looks
    space out to one each ten minutes (at most FIRST_HOUR_EVENTS), then to one each twenty minutes with a re-ask
    every other look (at most LONG_WAIT_EVENTS_PER_HOUR). No job is made while they wait."""
    fleet = Fleet(limit=1, job_s=8 * 3600.0, deadline_s=9 * 3600.0, routes=ROUTES)
    async with running_fleet(own_env, fleet) as run:
        waiting = await waiting_behind_one_job(own_env, fleet, run, 20)
        first, then = await growth_per_hour(own_env, waiting, 1.0, 5.0)
        await record(waiting[0], LONG_WAIT_SPACING, "waits_hours_with_fallbacks")
    print(f"events an hour: first hour max {max(first)}, then max {max(then)}")
    assert max(first) <= FIRST_HOUR_EVENTS, first
    assert max(then) <= LONG_WAIT_EVENTS_PER_HOUR, then
    looks = [at for t, at, take in fleet.routed if t == "w00" and not take]
    assert 6 + 5 * 2 <= len(looks) <= 10 + 5 * 4, len(looks)  # six in the first hour, three an hour after
    assert fleet.jobs_of("w00") == 0 and fleet.requests["w00"] <= 3


async def test_tasks_without_fallbacks_waiting_hours_ask_again_every_half_hour(own_env):
    """Twenty tasks with no fallback wait six hours: a re-ask every ten minutes in the first hour, every
    thirty after, so their histories grow by at most LONG_WAIT_EVENTS_PER_HOUR an hour once they have waited an
    hour; every task keeps its place (no request lost) and none makes a job."""
    fleet = Fleet(limit=1, job_s=8 * 3600.0, deadline_s=9 * 3600.0)
    async with running_fleet(own_env, fleet) as run:
        waiting = await waiting_behind_one_job(own_env, fleet, run, 20)
        _, then = await growth_per_hour(own_env, waiting, 1.5, 4.5)
        gate = await snapshot(run.gate)
        await record(waiting[0], LONG_WAIT_SPACING, "waits_hours_without_fallbacks")
    print(f"events an hour after the first 1.5 hours: max {max(then)}")
    assert max(then) <= LONG_WAIT_EVENTS_PER_HOUR, then
    assert gate.waiting == 20 and gate.in_use == 1
    assert all(fleet.jobs_of(f"w{i:02d}") == 0 for i in range(20))


async def test_tasks_waiting_while_every_route_is_unhealthy_look_less_often_after_an_hour(own_env):
    """Both routes' breakers open (every submit answered 503; a cool-down longer than the test): twelve tasks wait
    with no usable route, looking every minute for their first hour, then every twenty minutes: their histories
    grow by at most LONG_WAIT_EVENTS_PER_HOUR an hour (it was ~360 an hour: a 720-hour task broke the server's
    limit after ~140 hours). No submit reaches a provider whose breaker is open."""
    policy = BreakerPolicy(failures=1, failure_ratio=0.5, window_s=30, cooldown_s=12 * 3600.0)
    fleet = Fleet(limit=2, job_s=60.0, breaker=policy, routes=ROUTES, failing="http_503")
    async with running_fleet(own_env, fleet) as run:
        handles = [await run.start(f"u{i:02d}") for i in range(12)]
        fallback_gate = own_env.client.get_workflow_handle(api.gate_id(FALLBACK, run.queue))
        for gate in (run.gate, fallback_gate):
            await until_open(own_env, gate)
        submits = len(fleet.submits)
        first, then = await growth_per_hour(own_env, handles, 1.5, 4.5)
        still_open = [(await snapshot(gate)).breaker for gate in (run.gate, fallback_gate)]
        await record(handles[-1], LONG_WAIT_SPACING, "waits_hours_with_every_route_unhealthy")
    print(f"events an hour: first 1.5 hours max {max(first)}, then max {max(then)}")
    assert still_open == [BreakerMode.OPEN, BreakerMode.OPEN]
    assert len(fleet.submits) == submits, "a submit went to a provider whose breaker was open"
    assert max(then) <= LONG_WAIT_EVENTS_PER_HOUR, then
    assert max(first) > 2 * LONG_WAIT_EVENTS_PER_HOUR, first  # the first hour still looks every minute
    for task_id, _, _, mode in fleet.sent_under:
        assert mode is not BreakerMode.OPEN, f"{task_id} sent while its provider's breaker was open"
