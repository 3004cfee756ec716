"""The provider breaker on the real stack: the emulator answers 5xx to every submit, the breaker
opens, new tasks wait QUEUED (nothing is sent) while the jobs already running go on being polled,
`reelqueue status --json` shows it open; once the fault ends the probe closes it and every task
succeeds with one paid job, its ledger balanced."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime

import httpx
import pytest
from cli_helpers import run_cli_async
from sqlalchemy import func, select
from stack_helpers import assert_ledger_balanced, import_small, serving, wait_for_status

from config.defaults import BreakerPolicy, ProviderLimits
from contracts import workflow_api as api
from contracts.admission import BreakerMode, GateSnapshot
from control.starting import start_workflows
from schema import queries
from schema.db import Database
from schema.models import Attempt

pytestmark = [pytest.mark.integration, pytest.mark.long]
# A cool-down long enough for the test to see the open breaker settle (waits on state, not sleeps)
# on a loaded machine; the first jobs outlast it, so they are followed all through the outage.
POLICY = BreakerPolicy(failures=3, failure_ratio=0.5, window_s=60, cooldown_s=60)
FIRST_JOB_S = 100


def _tasks(settings, import_id: str) -> list:
    with Database(settings.database_url).transaction() as session:
        return queries.list_tasks(session, import_id)


def _stats(settings) -> dict:
    return httpx.get(f"{settings.emulator_url}/_sim/stats", timeout=10).json()


def _faults(settings, **faults) -> None:
    httpx.post(f"{settings.emulator_url}/_sim/faults", json=faults, timeout=10).raise_for_status()


async def _gate_until(client, queue: str, check, timeout_s: float = 60) -> GateSnapshot:
    gate = client.get_workflow_handle(api.gate_id("emulator", queue))
    deadline = time.monotonic() + timeout_s
    while True:
        snapshot = await gate.query(api.QUERY_GATE_SNAPSHOT, result_type=GateSnapshot)
        if check(snapshot):
            return snapshot
        assert time.monotonic() < deadline, snapshot
        await asyncio.sleep(0.2)


async def _until(check, timeout_s: float, what: str):  # noqa: ANN001, ANN202 - a predicate returning a value or None
    deadline = time.monotonic() + timeout_s
    while (value := check()) is None:
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.3)
    return value


def _settled(settings, queued_import: str, running: int, snapshot: GateSnapshot):  # noqa: ANN202
    """The open breaker's steady state: every queued task back in the gate's line, no slot held but
    the running jobs', no submit in flight. From here nothing can be sent until the probe."""
    with Database(settings.database_url).transaction() as session:
        tasks = queries.list_tasks(session, queued_import)
        sending = session.scalar(select(func.count()).select_from(Attempt).where(
            Attempt.task_id.in_([t.id for t in tasks]), Attempt.submit_state == "SENDING"))
    line = snapshot.in_use == running and snapshot.waiting == len(tasks)
    return True if line and not sending and {t.status for t in tasks} == {"QUEUED"} else None


async def _status_json(import_id: str) -> dict:
    """`reelqueue status --json`; asked again if the gate did not answer within its 0.5 s (a busy machine)."""
    for _ in range(5):
        shown = await run_cli_async("status", import_id, "--json")
        assert shown.code == 0, shown.stdout
        if not shown.json["providers"]["emulator"]["stale"]:
            return shown.json
    raise AssertionError(f"the gate never answered `status` in time: {shown.stdout}")


@pytest.mark.timeout(420)
async def test_a_failing_provider_opens_the_breaker_and_a_probe_closes_it(stack, client, tmp_path, monkeypatch,
                                                                          emulator_jobs):
    settings = stack.model_copy(update={"provider_limits": {"emulator": ProviderLimits(max_concurrent=6)},
                                        "provider_breaker": POLICY, "webhooks_enabled": False})
    queue = f"test-{uuid.uuid4().hex[:12]}"
    monkeypatch.setenv("REELQUEUE_TASK_QUEUE", queue)  # `reelqueue status` reads this queue's gates
    # Catalog names from the folders: unique per run, so a repeated run imports new tasks.
    running = import_small(stack, tmp_path / f"running-{queue}", [(f"R-{i}", f"Lamp {i}", "Warm") for i in range(2)],
                           duration_s=1)
    queued = import_small(stack, tmp_path / f"queued-{queue}", [(f"Q-{i}", f"Chair {i}", "Oak") for i in range(8)],
                          duration_s=1)
    httpx.delete(f"{stack.emulator_url}/_sim/stats", timeout=10)
    _faults(stack, job_seconds=FIRST_JOB_S)  # the first jobs run through the outage
    try:
        async with serving(client, settings, queue):
            first = _tasks(stack, running.import_id)
            await start_workflows(client, first, running.import_id, queue)
            for task in first:
                await wait_for_status(stack, task.id, {"RUNNING"}, timeout_s=60)
            _faults(stack, submit_status=503, submit_status_count=10_000, job_seconds=2)
            second = _tasks(stack, queued.import_id)
            await start_workflows(client, second, queued.import_id, queue)
            opened = await _gate_until(client, queue, lambda g: g.breaker is BreakerMode.OPEN)
            # Every refused task back in line (its retry wait over), no submit in flight: settled.
            await _gate_until(client, queue, lambda g: _settled(stack, queued.import_id, len(first), g),
                              timeout_s=POLICY.cooldown_s)
            before = _stats(stack)
            # The running jobs' status calls go on meanwhile (polling: no webhooks here).
            during = await _until(lambda: (d := _stats(stack))["status_calls"] > before["status_calls"] and d or None,
                                  POLICY.cooldown_s, "no status call while the breaker was open")
            waiting = {t.status for t in _tasks(stack, queued.import_id)}
            shown = await _status_json(queued.import_id)
            still_running = {t.status for t in _tasks(stack, running.import_id)}
            still_open = (await _gate_until(client, queue, lambda g: True)).breaker is BreakerMode.OPEN
            httpx.delete(f"{stack.emulator_url}/_sim/faults", timeout=10)  # the provider is back
            closed = await _gate_until(client, queue, lambda g: g.breaker is BreakerMode.CLOSED and g.in_use == 0
                                       and g.waiting == 0, timeout_s=180)
            await asyncio.wait_for(asyncio.gather(*(client.get_workflow_handle(t.workflow_id).result()
                                                    for t in first + second)), timeout=180)
    finally:
        httpx.delete(f"{stack.emulator_url}/_sim/faults", timeout=10)

    assert still_open, "the cool-down ended before the open breaker was seen settled: the test saw nothing"
    assert during["submits"] == before["submits"]  # nothing sent while open
    assert during["status_calls"] > before["status_calls"]  # the running jobs are still followed
    assert still_running == {"RUNNING"} and waiting == {"QUEUED"}
    breaker = shown["providers"]["emulator"]
    assert breaker["breaker"] == "open" and breaker["breaker_opens"] == 1 and breaker["breaker_open_until"]
    assert (closed.breaker_opens, closed.breaker_open_until) == (1, None)

    ended = _tasks(stack, running.import_id) + _tasks(stack, queued.import_id)
    assert {t.status for t in ended} == {"SUCCEEDED"}
    keys = [j["request_key"] for j in emulator_jobs()]
    assert all(sum(k.startswith(t.id) for k in keys) == 1 for t in ended)  # one paid job each
    with Database(stack.database_url).transaction() as session:
        sent = session.execute(select(Attempt.sent_at, Attempt.submit_state).where(
            Attempt.task_id.in_([t.id for t in second]))).all()
    refused = [at for at, state in sent if state == "FAILED_BEFORE_ACCEPT"]
    accepted = sorted(at for at, state in sent if state != "FAILED_BEFORE_ACCEPT")
    assert len(refused) >= POLICY.failures and max(refused) <= opened.breaker_open_until
    assert accepted[0] >= opened.breaker_open_until  # the probe, after the cool-down
    assert opened.breaker_open_until <= datetime.now(UTC)
    assert_ledger_balanced(stack, [t.id for t in ended])
    check = await run_cli_async("ledger", "check", queued.import_id, "--json")
    assert check.code == 0, check.stdout
