"""Admission on the real stack: a provider limit shared through the provider's gate holds at the
emulator, and refusals before acceptance (429) are waited out, not spent as attempts."""

from __future__ import annotations

import uuid

import httpx
import pytest
from cli_helpers import run_cli_async
from stack_helpers import import_small, run_all, serving

from config.defaults import ProviderLimits
from contracts import workflow_api as api
from contracts.admission import GateSnapshot

pytestmark = pytest.mark.integration
LIMIT = 3


@pytest.mark.timeout(600)  # its run may take 300 s
async def test_limit_holds_and_refusals_are_waited_out(stack, client, tmp_path, emulator_jobs):
    settings = stack.model_copy(update={"provider_limits": {"emulator": ProviderLimits(max_concurrent=LIMIT)}})
    queue = f"test-{uuid.uuid4().hex[:12]}"
    products = [(f"A-{i}", f"Item {i}", f"Thing {i}") for i in range(12)]
    summary = import_small(stack, tmp_path, products, duration_s=1)
    httpx.delete(f"{stack.emulator_url}/_sim/stats", timeout=10)
    httpx.post(f"{stack.emulator_url}/_sim/faults", json={"submit_status": 429, "submit_status_count": 4},
               timeout=10).raise_for_status()
    try:
        async with serving(client, settings, queue):
            finished = await run_all(client, stack, summary.import_id, queue, timeout=300)
            gate = client.get_workflow_handle(api.gate_id("emulator", queue))
            snapshot = await gate.query(api.QUERY_GATE_SNAPSHOT, result_type=GateSnapshot)
            await gate.terminate("test over")
    finally:
        httpx.delete(f"{stack.emulator_url}/_sim/faults", timeout=10)
    stats = httpx.get(f"{stack.emulator_url}/_sim/stats", timeout=10).json()

    assert [t.status for t in finished] == ["SUCCEEDED"] * 12
    assert stats["refused_429"] == 4 and snapshot.throttles == 4
    assert stats["max_alive"] <= LIMIT, stats  # never more jobs at the provider than the limit
    keys = [j["request_key"] for j in emulator_jobs()]
    for task in finished:
        assert sum(k.startswith(task.id) for k in keys) == 1, task.id
    assert snapshot.in_use == 0 and snapshot.waiting == 0 and snapshot.granted >= 12
    check = await run_cli_async("ledger", "check", summary.import_id, "--json")
    assert check.code == 0, check.stdout
