"""The platform's and a model's admission layers on the time-skipping server (admission-layers-v1): no
more jobs alive at once than the platform's total across tenants, nor than a model's limit while the
provider's other models go on beside it; every slot of every layer is given back as tasks end, and a
task cancelled while it waits at a layer leaves that layer's line without a job.

`REELQUEUE_RECORD_HISTORIES=1` records the histories into tests/fixtures/histories/<workflow>/admission-layers-v1/.
"""

from __future__ import annotations

import pytest
from fleet_fakes import Fleet, peak, running_fleet
from histories import record
from prometheus_client import CollectorRegistry, generate_latest
from server_clock import time_skipping_server
from temporalio.runtime import MetricBuffer, MetricBufferDurationFormat, Runtime, TelemetryConfig
from test_admission_bounds import finish, snapshot
from workflow_fakes import until

from contracts import workflow_api as api
from contracts.messages import CancelRequest
from contracts.task import TaskStatus as S
from metrics.sdk import SdkMetrics
from workflows.generation.patches import ADMISSION_LAYERS

pytestmark = pytest.mark.long


async def test_the_platform_total_holds_across_tenants_and_every_slot_comes_back(own_env):
    tasks = [f"p{i:02d}" for i in range(12)]
    fleet = Fleet(limit=10, job_s=180.0, platform_limit=3, tenant_limit=5,
                  tenants={t: ("acme" if i % 2 else "other") for i, t in enumerate(tasks)})
    async with running_fleet(own_env, fleet) as run:
        for task_id in tasks:
            await run.start(task_id)
            await own_env.sleep(1)
        await finish(own_env, fleet, run)
        platform = own_env.client.get_workflow_handle(api.gate_id(api.PLATFORM_GATE, run.queue))
        gate, provider = await snapshot(platform), await snapshot(run.gate)
        await record(run.handles[-1], ADMISSION_LAYERS, "last_waits_for_the_platform")
        await record(platform, ADMISSION_LAYERS, "platform_gate")
    assert {fleet.status[t] for t in tasks} == {S.SUCCEEDED}
    assert peak(list(fleet.jobs.values()), fleet.job_s) == 3  # the platform's total, not the provider's 10
    assert (gate.limit, gate.in_use, gate.waiting, gate.granted) == (3, 0, 0, 12)
    assert (provider.in_use, provider.waiting) == (0, 0)
    assert all(fleet.balanced(t) for t in tasks) and {fleet.jobs_of(t) for t in tasks} == {1}


async def test_a_model_runs_at_most_its_limit_while_the_providers_other_models_go_on(own_env):
    limited, free = [f"m{i:02d}" for i in range(8)], [f"n{i:02d}" for i in range(4)]
    fleet = Fleet(limit=10, job_s=180.0, models={t: "turbo" for t in limited}, model_limits={"turbo": 2})
    async with running_fleet(own_env, fleet) as run:
        for task_id in limited + free:
            await run.start(task_id)
            await own_env.sleep(1)
        await finish(own_env, fleet, run)
        model = own_env.client.get_workflow_handle(api.gate_id(api.model_gate("fake", "turbo"), run.queue))
        gate = await snapshot(model)
        await record(run.handles[len(limited) - 1], ADMISSION_LAYERS, "last_of_a_model_waits_for_its_model")
        await record(model, ADMISSION_LAYERS, "model_gate")
    assert {fleet.status[t] for t in limited + free} == {S.SUCCEEDED}
    turbo = [j for j in fleet.jobs.values() if j.task_id in limited]
    others = [j for j in fleet.jobs.values() if j.task_id in free]
    assert peak(turbo, fleet.job_s) == 2
    first_turbo_end = min(j.submitted_at for j in turbo).timestamp() + fleet.job_s
    assert all(j.submitted_at.timestamp() < first_turbo_end for j in others)  # not behind the model's line
    assert (gate.limit, gate.in_use, gate.waiting, gate.granted) == (2, 0, 0, 8)
    assert all(fleet.balanced(t) for t in limited + free)


@pytest.mark.parametrize("layer", ["platform", "model"])
async def test_a_task_cancelled_while_it_waits_at_a_layer_leaves_its_line(own_env, layer):
    fleet = Fleet(limit=5, job_s=600.0, **({"platform_limit": 1} if layer == "platform" else
                                           {"model_limits": {"m": 1}}))
    gate_name = api.PLATFORM_GATE if layer == "platform" else api.model_gate("fake", "m")
    async with running_fleet(own_env, fleet) as run:
        await run.start("first")
        await own_env.sleep(1)
        second = await run.start("second")
        await until(own_env, lambda: fleet.status["second"] is S.QUEUED and fleet.jobs_of("first") == 1)
        gate = own_env.client.get_workflow_handle(api.gate_id(gate_name, run.queue))
        await until(own_env, lambda: True, step_s=5, tries=1)
        assert (await snapshot(gate)).waiting == 1
        await second.signal(api.SIGNAL_CANCEL, CancelRequest(reason="changed my mind", requested_by="test"))
        await until(own_env, lambda: fleet.status["second"] is S.CANCELED)
        after = await snapshot(gate)
        await finish(own_env, fleet, run)
        last = await snapshot(gate)
        provider = await snapshot(run.gate)
        await record(second, ADMISSION_LAYERS, f"cancelled_while_waiting_for_the_{layer}")
    assert fleet.jobs_of("second") == 0 and fleet.balanced("second")
    assert (after.waiting, after.in_use) == (0, 1) and fleet.status["first"] is S.SUCCEEDED
    assert (last.in_use, last.waiting, provider.in_use, provider.waiting) == (0, 0, 0, 0)


async def test_every_layers_gate_is_in_the_worker_metrics():
    """Each gate sets its limit, slots in use, waiting tasks and oldest wait in the SDK's metrics (the
    worker's /metrics), labelled by gate and layer."""
    buffer = MetricBuffer(10_000, MetricBufferDurationFormat.SECONDS)
    fleet = Fleet(limit=4, job_s=600.0, platform_limit=1, tenant_limit=3, model_limits={"m": 2})
    async with time_skipping_server(Runtime(telemetry=TelemetryConfig(metrics=buffer))) as env, \
            running_fleet(env, fleet) as run:
        for task_id in ("a", "b"):
            await run.start(task_id)
            await env.sleep(1)
        await until(env, lambda: fleet.jobs_of("a") == 1 and fleet.status["b"] is S.QUEUED)
        await env.sleep(30)  # the waiting task's line has aged; one more round of each gate
        platform = await snapshot(env.client.get_workflow_handle(api.gate_id(api.PLATFORM_GATE, run.queue)))
        registry = CollectorRegistry()
        registry.register(SdkMetrics(buffer))
        lines = generate_latest(registry).decode().splitlines()
        await finish(env, fleet, run)
    assert fleet.status["a"] is S.SUCCEEDED and fleet.status["b"] is S.SUCCEEDED

    def value(name: str, layer: str) -> float:
        found = [line for line in lines if line.startswith(f"{name}{{") and f'layer="{layer}"' in line]
        assert len(found) == 1, (name, layer, found)
        return float(found[0].rsplit(" ", 1)[1])

    assert value("reelqueue_admission_limit", "platform") == 1.0
    assert value("reelqueue_admission_limit", "tenant") == 3.0
    assert value("reelqueue_admission_limit", "model") == 2.0
    assert value("reelqueue_admission_limit", "provider") == 4.0
    assert (value("reelqueue_admission_in_use", "model"), value("reelqueue_admission_in_use", "platform")) == (2.0, 1.0)
    assert value("reelqueue_admission_waiting", "platform") == 1.0 and platform.waiting == 1
    assert value("reelqueue_admission_oldest_wait_seconds", "platform") > 0
