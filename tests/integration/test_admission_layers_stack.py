"""Each admission layer on the real stack (the platform's, a tenant's, a provider's, a model's): 50 short clips at once
behind one layer's limit, the worker SIGKILLed mid-run and started again; the emulator never holds more
jobs than the layer allows, every task succeeds with one job, and the invariant checker finds no
slot of any layer held by a finished task. `status --json` shows the layer's gate."""

from __future__ import annotations

import asyncio
import json
import signal
import uuid

import httpx
import pytest
from cli_helpers import run_cli_async
from sqlalchemy import update
from stack_helpers import import_small, run_all

import devstack
from contracts import workflow_api as api
from contracts.admission import GateSnapshot
from control.invariants import check_invariants, emulator_jobs_by_task
from control.starting import start_workflows
from schema import queries
from schema.db import Database
from schema.models import Tenant

pytestmark = [pytest.mark.integration, pytest.mark.long]

TASKS, LIMIT, PROVIDER_LIMIT = 50, 3, 12  # 50 behind 3: the kill once the layer is full, then 16 turns of its slots


async def _in_use(client, gate_id: str) -> int:
    try:
        snapshot = await client.get_workflow_handle(gate_id).query(api.QUERY_GATE_SNAPSHOT, result_type=GateSnapshot)
    except Exception:  # noqa: BLE001 - not started yet, or no worker answers the query
        return 0
    return snapshot.in_use


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("layer", ["platform", "tenant", "provider", "model"])
async def test_a_layers_limit_holds_for_50_tasks_through_a_sigkilled_worker(stack, client, tmp_path, monkeypatch,
                                                                            layer):
    queue = f"layers-{uuid.uuid4().hex[:10]}"
    products = [(f"L-{i:03d}", f"Layer item {i}", f"Thing {i}") for i in range(TASKS)]
    tenant = f"layers-{uuid.uuid4().hex[:8]}"  # a tenant of its own: its concurrency is the tenant layer's limit
    summary = import_small(stack.model_copy(update={"tenant": tenant}), tmp_path, products, duration_s=1)
    db = Database(stack.database_url)
    with db.transaction() as session:
        tasks = queries.list_tasks(session, summary.import_id)
        if layer == "tenant":
            session.execute(update(Tenant).where(Tenant.id == tenant).values(max_concurrent=LIMIT))
    model = tasks[0].model
    limits = {"emulator": {"max_concurrent": LIMIT if layer == "provider" else PROVIDER_LIMIT,
                           "models": {model: {"max_concurrent": LIMIT}} if layer == "model" else {}}}
    env = {"REELQUEUE_TASK_QUEUE": queue, "REELQUEUE_PROVIDER_LIMITS": json.dumps(limits),
           "REELQUEUE_PLATFORM_MAX_CONCURRENT": str(LIMIT if layer == "platform" else 0)}
    for name, value in env.items():
        monkeypatch.setenv(name, value)  # the worker process and the CLI read these
    settings = stack.model_copy(update={"task_queue": queue, "provider_limits": limits,
                                        "platform_max_concurrent": LIMIT if layer == "platform" else 0})
    name = {"platform": api.PLATFORM_GATE, "tenant": api.tenant_gate(tenant), "provider": "emulator",
            "model": api.model_gate("emulator", model)}[layer]
    gate = api.gate_id(name, queue)
    httpx.delete(f"{stack.emulator_url}/_sim/stats", timeout=10)
    devstack.up(stack, services=["worker"])
    try:
        await start_workflows(client, tasks, summary.import_id, queue)
        full = False
        for _ in range(240):  # the layer full: the kill lands mid-run, with slots held
            if full := await _in_use(client, gate) == LIMIT:
                break
            await asyncio.sleep(0.5)
        devstack.kill_service(stack, "worker", signal.SIGKILL)
        devstack.restart_service(stack, "worker")
        finished = await run_all(client, stack, summary.import_id, queue, timeout=900)
        status = await run_cli_async("status", summary.import_id, "--json")
        report = await check_invariants(settings, import_id=summary.import_id,
                                        provider_jobs=emulator_jobs_by_task(stack), storage=False)
    finally:
        devstack.kill_service(stack, "worker", signal.SIGTERM)
    stats = httpx.get(f"{stack.emulator_url}/_sim/stats", timeout=10).json()
    print(f"\n{layer}: max alive {stats['max_alive']} of a limit of {LIMIT}; {stats['submits']} submits")
    assert full, "the layer was never full before the kill"
    assert [t.status for t in finished] == ["SUCCEEDED"] * TASKS
    assert 0 < stats["max_alive"] <= LIMIT, stats
    rule = report.rule("gate_slots")
    assert rule.checked and rule.violations == 0, rule
    assert gate in rule.detail, rule.detail
    shown = json.loads(status.stdout)
    shown = shown["providers"] if layer == "provider" else shown["layers"][
        {"platform": "platform", "tenant": "tenants", "model": "models"}[layer]]
    assert (shown[name]["limit"], shown[name]["in_use"], shown[name]["waiting"]) == (LIMIT, 0, 0), shown
