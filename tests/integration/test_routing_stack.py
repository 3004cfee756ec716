"""Routing with fallback on the real stack: twelve tasks whose template's primary is the emulator and whose
fallback is Runway (the emulator's Runway dialect). The emulator's own dialect answers 503 to every submit
(a fault scoped to it) until its breaker opens: every task ends SUCCEEDED, those submitted after it opened
on Runway, one paid job each, `ledger check` ok, every attempt naming its route. With `lock_model = true`
no task leaves the emulator: they wait for its breaker's probe and succeed there once it is back."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import datetime, timedelta
from decimal import Decimal

import httpx
import pytest
from cli_helpers import run_cli_async
from sqlalchemy import select
from stack_helpers import assert_ledger_balanced, import_small, run_all, serving
from temporalio.service import RPCError
from test_api_generations import _image, _tenant, _until, gateway

from activities.ledger import held_for_video
from config.defaults import BreakerPolicy, ProviderLimits
from contracts import workflow_api as api
from contracts.admission import GateSnapshot
from control.starting import start_workflows
from reelqueue_client import ApiProblem, GenerationRequest, ReelqueueClient
from schema import queries
from schema.db import Database
from schema.models import Attempt

pytestmark = [pytest.mark.integration, pytest.mark.long]
POLICY = BreakerPolicy(failures=3, failure_ratio=0.5, window_s=60, cooldown_s=20)
FALLBACK = 'fallbacks = [{ provider = "runway", model = "gen4_turbo" }]'
TASKS = 12


def _faults(settings, **faults) -> None:
    httpx.post(f"{settings.emulator_url}/_sim/faults", json=faults, timeout=10).raise_for_status()


async def _run(stack, client, tmp_path, template_extra: str, *, heal_after_open: bool):
    """Import and run the twelve tasks with the emulator's own submits failing; their tasks, attempts
    (task id -> rows in order) and the emulator gate's last snapshot."""
    settings = stack.model_copy(update={
        "provider_limits": {"emulator": ProviderLimits(max_concurrent=4), "runway": ProviderLimits(max_concurrent=12)},
        "provider_breaker": POLICY, "webhooks_enabled": False})
    queue = f"test-{uuid.uuid4().hex[:12]}"
    imported = import_small(stack, tmp_path / f"routes-{queue}",
                            [(f"P-{i}", f"Vase {i}", "Glass") for i in range(TASKS)], template_extra=template_extra)
    _faults(stack, dialect="emulator", submit_status=503, submit_status_count=10_000)
    try:
        async with serving(client, settings, queue):
            if heal_after_open:
                tasks = await _run_healing(client, settings, imported.import_id, queue)
            else:
                tasks = await run_all(client, settings, imported.import_id, queue, timeout=400)
            gate = await client.get_workflow_handle(api.gate_id("emulator", queue)).query(
                api.QUERY_GATE_SNAPSHOT, result_type=GateSnapshot)
    finally:
        httpx.delete(f"{stack.emulator_url}/_sim/faults", timeout=10)
    with Database(stack.database_url).transaction() as session:
        tasks = queries.list_tasks(session, imported.import_id)
        rows = session.scalars(select(Attempt).where(Attempt.task_id.in_([t.id for t in tasks]))
                               .order_by(Attempt.task_id, Attempt.attempt_no)).all()
        attempts = {t.id: [a for a in rows if a.task_id == t.id] for t in tasks}
    return imported, tasks, attempts, gate


async def _run_healing(client, settings, import_id: str, queue: str):
    """Start the tasks, wait for the emulator's breaker to open, then end the fault: its probe closes it."""
    with Database(settings.database_url).transaction() as session:
        tasks = queries.list_tasks(session, import_id)
    await start_workflows(client, tasks, import_id, queue)
    gate = client.get_workflow_handle(api.gate_id("emulator", queue))
    opened = False
    for _ in range(600):
        with contextlib.suppress(RPCError):  # its gate starts with the first ask
            opened = (await gate.query(api.QUERY_GATE_SNAPSHOT, result_type=GateSnapshot)).breaker_opens > 0
        if opened:
            break
        await asyncio.sleep(0.2)
    assert opened, "the emulator's breaker never opened"
    httpx.delete(f"{settings.emulator_url}/_sim/faults", timeout=10)
    await asyncio.wait_for(asyncio.gather(*(client.get_workflow_handle(t.workflow_id).result() for t in tasks),
                                          return_exceptions=True), timeout=400)
    return tasks


def _one_job_each(emulator_jobs, before: set[str], attempts: dict) -> None:
    """The emulator made one job per task in the run, on any dialect (a refused submit makes none): the
    job its last attempt followed."""
    made = {j["id"] for j in emulator_jobs()} - before
    followed = {rows[-1].provider_job_id for rows in attempts.values()}
    assert len(made) == len(attempts) and followed == made, (sorted(made), sorted(followed))


@pytest.mark.timeout(600)
async def test_tasks_leave_a_failing_provider_for_their_fallback_route(stack, client, tmp_path, emulator_jobs):
    before = {j["id"] for j in emulator_jobs()}
    imported, tasks, attempts, gate = await _run(stack, client, tmp_path, FALLBACK, heal_after_open=False)
    assert {t.status for t in tasks} == {"SUCCEEDED"}
    _one_job_each(emulator_jobs, before, attempts)
    opened_at = gate.breaker_open_until - timedelta(seconds=POLICY.cooldown_s)
    for task in tasks:
        *before, last = attempts[task.id]
        assert (last.provider, last.model) == ("runway", "gen4_turbo") and last.provider_job_id
        assert all(a.provider == "emulator" and a.submit_state == "FAILED_BEFORE_ACCEPT" for a in before)
        assert all(a.route_note for a in attempts[task.id])  # every attempt names its route
        assert last.route_note.startswith("runway/gen4_turbo; emulator/emu-motion-1 skipped (unhealthy")
    on_emulator = [a for rows in attempts.values() for a in rows if a.provider == "emulator"]
    assert len(on_emulator) >= POLICY.failures and all(a.sent_at <= opened_at for a in on_emulator)
    assert gate.breaker_opens >= 1 and gate.in_use == 0 and gate.waiting == 0
    assert_ledger_balanced(stack, [t.id for t in tasks])
    check = await run_cli_async("ledger", "check", imported.import_id, "--json")
    assert check.code == 0, check.stdout
    shown = await run_cli_async("show", tasks[0].id, "--json")
    assert shown.json["attempts"][-1]["route_note"] == attempts[tasks[0].id][-1].route_note


@pytest.mark.timeout(600)
async def test_lock_model_keeps_every_task_on_its_primary_route(stack, client, tmp_path, emulator_jobs):
    before = {j["id"] for j in emulator_jobs()}
    imported, tasks, attempts, gate = await _run(stack, client, tmp_path, f"{FALLBACK}\nlock_model = true",
                                                 heal_after_open=True)
    assert {t.status for t in tasks} == {"SUCCEEDED"}
    _one_job_each(emulator_jobs, before, attempts)
    rows = [a for task_rows in attempts.values() for a in task_rows]
    assert {a.provider for a in rows} == {"emulator"}  # none left its primary route
    assert all("runway/gen4_turbo skipped (locked" in a.route_note for a in rows)
    assert gate.breaker_opens >= 1
    assert_ledger_balanced(stack, [t.id for t in tasks])
    check = await run_cli_async("ledger", "check", imported.import_id, "--json")
    assert check.code == 0, check.stdout


@pytest.mark.timeout(300)
async def test_an_api_generation_takes_the_fallback_it_names_and_an_unknown_one_is_refused(stack, client):
    """POST /v1/generations with `fallbacks`: a route this deployment cannot serve is 422 naming it; the
    emulator's own submits failing (its breaker opens at the first), the generation succeeds on Runway and
    GET shows the route and why the emulator was skipped."""
    settings = stack.model_copy(update={"webhooks_enabled": False, "provider_breaker": BreakerPolicy(
        failures=1, failure_ratio=0.5, window_s=60, cooldown_s=120)})
    queue = f"test-{uuid.uuid4().hex[:12]}"
    db = Database(stack.database_url)
    tenant, key = _tenant(db)
    image = _image(stack, db, tenant)
    body = GenerationRequest(prompt="A vase on a shelf", image_asset_id=image, duration_s=2,
                             fallbacks=[{"provider": "runway", "model": "gen4_turbo"}])
    _faults(stack, dialect="emulator", submit_status=503, submit_status_count=10_000)
    try:
        async with serving(client, settings, queue):
            with gateway(stack, queue) as base:
                api = ReelqueueClient(base, key)
                with pytest.raises(ApiProblem) as refused:
                    api.create_generation(body.model_copy(update={"fallbacks": [{"provider": "runway",
                                                                                 "model": "gen9"}]}))
                gen = api.create_generation(body)
                done = await _until(api, gen.id, {"SUCCEEDED", "FAILED_FINAL", "INVALID", "EXPIRED"}, timeout_s=240)
    finally:
        httpx.delete(f"{stack.emulator_url}/_sim/faults", timeout=10)
    assert (refused.value.status, refused.value.slug) == (422, "unsupported-route")
    assert "fallbacks[0]: runway has no model 'gen9'" in refused.value.detail
    assert done.status == "SUCCEEDED", done
    assert (done.provider, done.model) == ("runway", "gen4_turbo")
    assert done.route_note.startswith("runway/gen4_turbo; emulator/emu-motion-1 skipped (unhealthy")
    assert_ledger_balanced(stack, [gen.id])


THREE_ROUTES = ('fallbacks = [{ provider = "runway", model = "gen4_turbo" }, '
                '{ provider = "kling", model = "kling-v2-1" }]')
PRICES = {"emulator": Decimal(6), "runway": Decimal(7), "kling": Decimal(8)}  # credits for a 5-s video (Kling: 5 or 10)


async def _breaker_opened(client, queue: str, provider: str) -> datetime | None:
    """When `provider`'s breaker opened last (None: never), from its gate."""
    with contextlib.suppress(RPCError):
        gate = await client.get_workflow_handle(api.gate_id(provider, queue)).query(
            api.QUERY_GATE_SNAPSHOT, result_type=GateSnapshot)
        if gate.breaker_opens and gate.breaker_open_until is not None:
            return gate.breaker_open_until - timedelta(seconds=LONG_POLICY.cooldown_s)
    return None


LONG_POLICY = BreakerPolicy(failures=3, failure_ratio=0.5, window_s=60, cooldown_s=900)  # no probe within the test


@pytest.mark.timeout(600)
async def test_tasks_follow_their_routes_as_each_provider_fails_and_nothing_is_sent_past_an_open_breaker(
        stack, client, tmp_path, emulator_jobs):
    """Routes emulator (A) -> Runway (B) -> Kling (C), each dearer. A's dialect refuses every submit; once B
    made its first job its dialect refuses too (B's limit of 1 keeps tasks in its line, which leave it for C
    before their next attempt: a second route change of one attempt, whose difference a key by attempt
    left unheld). Every task SUCCEEDS with one paid job; no submit reaches a provider on a slot granted
    after its breaker opened (each opens once: the cool-down outlasts the test); every task holds exactly
    its route's price; `ledger check` ok."""
    settings = stack.model_copy(update={
        "provider_limits": {"emulator": ProviderLimits(max_concurrent=4), "runway": ProviderLimits(max_concurrent=1),
                            "kling": ProviderLimits(max_concurrent=12)},
        "provider_breaker": LONG_POLICY, "webhooks_enabled": False, "emulate_providers": True,
        "runway_prices": {"gen4_turbo": 1.4}, "kling_prices": {"kling-v2-1": 1.6}})
    queue = f"test-{uuid.uuid4().hex[:12]}"
    imported = import_small(stack, tmp_path / f"three-{queue}",
                            [(f"Q-{i}", f"Bowl {i}", "Clay") for i in range(TASKS)], template_extra=THREE_ROUTES,
                            duration_s=5)
    before = {j["id"] for j in emulator_jobs()}
    db = Database(stack.database_url)
    with db.transaction() as session:
        tasks = queries.list_tasks(session, imported.import_id)
    _faults(stack, dialect="emulator", submit_status=503, submit_status_count=10_000)
    try:
        async with serving(client, settings, queue):
            await start_workflows(client, tasks, imported.import_id, queue)
            for _ in range(1500):  # B's first jobs, then B fails too
                if sum(j["request_key"].startswith("runway:") for j in emulator_jobs() if j["id"] not in before) >= 1:
                    break
                await asyncio.sleep(0.2)
            _faults(stack, dialect="runway", submit_status=503, submit_status_count=10_000)
            await asyncio.wait_for(asyncio.gather(*(client.get_workflow_handle(t.workflow_id).result()
                                                    for t in tasks), return_exceptions=True), timeout=450)
            opened = {p: await _breaker_opened(client, queue, p) for p in PRICES}
    finally:
        httpx.delete(f"{stack.emulator_url}/_sim/faults", timeout=10)
    with db.transaction() as session:
        tasks = queries.list_tasks(session, imported.import_id)
        rows = session.scalars(select(Attempt).where(Attempt.task_id.in_([t.id for t in tasks]))
                               .order_by(Attempt.task_id, Attempt.attempt_no)).all()
        attempts = {t.id: [a for a in rows if a.task_id == t.id] for t in tasks}
        holds = {t.id: held_for_video(session, t.id, 1) for t in tasks}
    assert {t.status for t in tasks} == {"SUCCEEDED"}, [(t.id, t.status, t.last_error) for t in tasks]
    _one_job_each(emulator_jobs, before, attempts)
    assert opened["emulator"] is not None and opened["runway"] is not None and opened["kling"] is None
    # The breaker governs grants: a slot granted while it was closed may be on its way to the provider when
    # the failures that open it are counted (emulator: 4 slots, opened by 3 failures, so 1 in flight at
    # most; Runway: 1 slot). Such a submit lands within moments of the opening (here once 10 ms after it,
    # the gate's workflow clock against Postgres' own); a submit on a slot granted after it would not.
    for provider, in_flight in (("emulator", 4 - LONG_POLICY.failures), ("runway", 0)):
        sent = [a for a in rows if a.provider == provider]
        late = [(a.task_id, a.attempt_no, a.sent_at) for a in sent if a.sent_at > opened[provider]]
        assert len(late) <= in_flight and all(at - opened[provider] < timedelta(seconds=2) for *_, at in late), \
            f"sent to {provider} after its breaker opened at {opened[provider]}: {late}"
    finals = {t.id: attempts[t.id][-1].provider for t in tasks}
    assert set(finals.values()) <= {"runway", "kling"} and "kling" in finals.values()
    assert {t: holds[t] for t in finals} == {t: PRICES[p] for t, p in finals.items()}
    check = await run_cli_async("ledger", "check", imported.import_id, "--json")
    assert check.code == 0, check.stdout
