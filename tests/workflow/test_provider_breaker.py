"""The provider breaker on the time-skipping server (gate-breaker-v1, breaker-v1): failing submits
open it at the threshold, it grants nothing while open (the tasks wait QUEUED, no attempt spent),
after the cool-down one probe goes, its success closes it and its failure re-opens it; a task whose
submit timed out reconciles with its own provider while the breaker is open.

`REELQUEUE_RECORD_HISTORIES=1` records the histories into tests/fixtures/histories/generation/breaker-v1/
(the tasks) and provider_gate/gate-breaker-v1/ (the gate).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from fleet_fakes import PROVIDER, Fleet, FleetRun, running_fleet
from histories import record
from prometheus_client import CollectorRegistry, generate_latest
from server_clock import time_skipping_server
from temporalio.runtime import MetricBuffer, MetricBufferDurationFormat, Runtime, TelemetryConfig
from test_admission_bounds import finish, snapshot
from test_live_details import current_details
from workflow_fakes import until

from config.defaults import BreakerPolicy
from contracts import workflow_api as api
from contracts.admission import BreakerMode, GateSnapshot
from contracts.messages import CancelRequest
from contracts.task import TaskStatus as S
from metrics.sdk import SdkMetrics
from workflows.generation.patches import BREAKER
from workflows.provider_gate import BREAKER as GATE_BREAKER

POLICY = BreakerPolicy(failures=3, failure_ratio=0.5, window_s=60, cooldown_s=300)
TASKS = [f"t{i}" for i in range(6)]


async def until_gate(env, run: FleetRun, check: Callable[[GateSnapshot], bool], step_s: float = 1.0) -> GateSnapshot:
    """Let (skipped) time pass until the gate's snapshot satisfies `check`; that snapshot."""
    for _ in range(2000):
        await env.sleep(step_s)
        gate = await snapshot(run.gate)
        if check(gate):
            return gate
    raise AssertionError("the gate never got there")


async def start_all(env, run: FleetRun) -> None:
    for task_id in TASKS:
        await run.start(task_id)
        # They ask in this order, and never at the whole second a gate's 1-s pause ends: the test
        # server fails a workflow task whose signal lands with a timer (as in test_provider_gate.py).
        await env.sleep(1.3)


def opened_at(gate: GateSnapshot, policy: BreakerPolicy) -> datetime:
    return gate.breaker_open_until - timedelta(seconds=policy.cooldown_s)


def submits_between(fleet: Fleet, start: datetime, end: datetime) -> list[tuple[str, datetime, str]]:
    return [s for s in fleet.submits if start <= s[1] < end]


def assert_all_succeeded_once(fleet: Fleet, tasks: list[str] = TASKS) -> None:
    """Every task SUCCEEDED with one provider job (no attempt spent on the outage), ledger balanced."""
    assert {fleet.status[t] for t in tasks} == {S.SUCCEEDED}
    assert {fleet.jobs_of(t) for t in tasks} == {1}
    assert all(fleet.balanced(t) for t in tasks)


async def test_failing_submits_open_the_breaker_the_queue_waits_and_a_probe_closes_it(own_env):
    fleet = Fleet(limit=2, job_s=60.0, breaker=POLICY, failing="http_503")
    async with running_fleet(own_env, fleet) as run:
        await start_all(own_env, run)
        opened = await until_gate(own_env, run, lambda g: g.breaker is BreakerMode.OPEN)
        failed = list(fleet.submits)
        fleet.failing = None  # the provider is back; the breaker learns it from its probe
        await own_env.sleep(POLICY.cooldown_s - 30)  # near the end of the cool-down
        held = await snapshot(run.gate)
        waiting = {t: fleet.status[t] for t in TASKS}
        await finish(own_env, fleet, run)
        closed = await snapshot(run.gate)
        await record(run.handles[0], BREAKER, "refused_by_a_failing_provider")
        await record(run.handles[-1], BREAKER, "queued_through_an_open_breaker")
        await record(run.gate, GATE_BREAKER, "opens_and_a_probe_closes_it")
    assert len(failed) == POLICY.failures and {f for _, _, f in failed} == {"http_503"}
    assert (held.breaker, held.breaker_opens, held.in_use) == (BreakerMode.OPEN, 1, 0)
    assert set(waiting.values()) == {S.QUEUED}  # none failed, none dispatched: they wait in line
    after = sorted(at for _, at, _ in fleet.submits[len(failed):])
    assert after[0] >= opened.breaker_open_until  # nothing was sent while open; the probe went first
    assert (closed.breaker, closed.breaker_opens, closed.breaker_open_until) == (BreakerMode.CLOSED, 1, None)
    failed_tasks = {t for t, _, _ in failed}
    assert all(sum(t == s for s, _, _ in fleet.submits) == 1 for t in set(TASKS) - failed_tasks)
    assert_all_succeeded_once(fleet)


async def test_a_failed_probe_reopens_the_breaker_for_another_cool_down(own_env):
    fleet = Fleet(limit=2, job_s=60.0, breaker=POLICY, failing="http_503")
    async with running_fleet(own_env, fleet) as run:
        await start_all(own_env, run)
        first = await until_gate(own_env, run, lambda g: g.breaker is BreakerMode.OPEN)
        again = await until_gate(own_env, run, lambda g: g.breaker_opens == 2, step_s=5)
        fleet.failing = None
        await finish(own_env, fleet, run)
        closed = await snapshot(run.gate)
        await record(run.gate, GATE_BREAKER, "a_failed_probe_reopens")
    probes = submits_between(fleet, opened_at(first, POLICY), opened_at(again, POLICY) + timedelta(seconds=1))
    assert len(probes) == 1 and probes[0][1] >= first.breaker_open_until  # one probe, after the cool-down
    probe_at = probes[0][1]
    assert probe_at + timedelta(seconds=POLICY.cooldown_s) <= again.breaker_open_until \
        <= probe_at + timedelta(seconds=POLICY.cooldown_s + 10)
    assert submits_between(fleet, probe_at + timedelta(seconds=1), again.breaker_open_until) == []
    assert (closed.breaker, closed.breaker_opens) == (BreakerMode.CLOSED, 2)
    assert_all_succeeded_once(fleet)


async def test_a_timed_out_submit_reconciles_with_its_own_provider_while_the_breaker_is_open(own_env):
    """SUBMIT_UNKNOWN is never sent elsewhere: the task asks its provider what became of the submit
    (not gated by the breaker), and submits again, to the same provider, only once the answer is
    "no job" and a slot is granted after the breaker closed."""
    policy = BreakerPolicy(failures=1, failure_ratio=0.5, window_s=60, cooldown_s=300)
    fleet = Fleet(limit=2, job_s=60.0, breaker=policy, failing="timeout")
    async with running_fleet(own_env, fleet) as run:
        await start_all(own_env, run)
        opened = await until_gate(own_env, run, lambda g: g.breaker is BreakerMode.OPEN)
        fleet.failing = None
        await finish(own_env, fleet, run)
        await record(run.handles[0], BREAKER, "unknown_submit_reconciles_while_open")
    start, end = opened_at(opened, policy), opened.breaker_open_until
    timed_out = [(t, at) for t, at, f in fleet.submits if f == "timeout"]
    assert timed_out and {t for t, _ in fleet.reconciled} == {t for t, _ in timed_out}
    assert all(start <= at < end for _, at in fleet.reconciled)  # asked while the breaker was open
    for task_id, at in timed_out:
        asked = min(r for t, r in fleet.reconciled if t == task_id and r >= at)
        assert all(s >= max(asked, end) for t, s, _ in fleet.submits if t == task_id and s > at)
    assert fleet.asked == {PROVIDER}
    assert_all_succeeded_once(fleet)


async def test_status_and_cancel_calls_go_on_while_the_breaker_is_open(own_env):
    """Only new submits wait: a running job is still followed (status calls) and can be cancelled."""
    fleet = Fleet(limit=6, job_s=3600.0, breaker=POLICY, webhooks=False)
    async with running_fleet(own_env, fleet) as run:
        running = await run.start("r0")
        await until(own_env, lambda: fleet.status["r0"] is S.RUNNING, step_s=1)
        fleet.failing = "http_503"
        for task_id in TASKS[:3]:
            await run.start(task_id)
        opened = await until_gate(own_env, run, lambda g: g.breaker is BreakerMode.OPEN)
        await own_env.sleep(60)
        await running.signal(api.SIGNAL_CANCEL, CancelRequest(reason="not needed", requested_by="test"))
        await until(own_env, lambda: fleet.status["r0"] is S.CANCELED, step_s=1)
        still = await snapshot(run.gate)
        fleet.failing = None
        await finish(own_env, fleet, run)
    start = opened_at(opened, POLICY)
    during = [(call, job) for call, job, at in fleet.followed if start < at < opened.breaker_open_until]
    assert ("poll_job", "r0-a1") in during and ("cancel_job", "r0-a1") in during
    assert still.breaker is BreakerMode.OPEN and fleet.cancelled() == ["r0-a1"] and fleet.balanced("r0")
    assert_all_succeeded_once(fleet, TASKS[:3])


async def test_the_breaker_is_in_the_worker_metrics_and_the_gate_details():
    """The gate sets `reelqueue_provider_breaker_state` (2 open) and counts its openings in the SDK's
    metrics (the worker's /metrics, metrics/sdk.py), and says it in its Web UI details."""
    buffer = MetricBuffer(10_000, MetricBufferDurationFormat.SECONDS)
    policy = BreakerPolicy(failures=1, cooldown_s=600)
    fleet = Fleet(limit=1, job_s=60.0, breaker=policy, failing="http_503")
    async with time_skipping_server(Runtime(telemetry=TelemetryConfig(metrics=buffer))) as env, \
            running_fleet(env, fleet) as run:
        await run.start("t0")
        await until_gate(env, run, lambda g: g.breaker is BreakerMode.OPEN)
        await env.sleep(5)  # one more round of the gate
        details = await current_details(run.gate)
    registry = CollectorRegistry()
    registry.register(SdkMetrics(buffer))
    text = generate_latest(registry).decode()
    state = [line for line in text.splitlines() if line.startswith("reelqueue_provider_breaker_state{")]
    opens = [line for line in text.splitlines() if line.startswith("reelqueue_provider_breaker_opens_total{")]
    assert len(state) == 1 and f'provider="{PROVIDER}"' in state[0] and state[0].endswith(" 2.0"), state
    assert len(opens) == 1 and opens[0].endswith(" 1.0"), opens
    assert details.startswith("**breaker open** · open until"), details
