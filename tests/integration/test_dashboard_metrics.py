"""Every metric the Temporal dashboards query exists where Prometheus scrapes it: on the stack's
Temporal dev server's /metrics (`--metrics-port`) or among the SDK's metrics as a worker serves
them (metrics/sdk.py: the collector over a Runtime's metric buffer, the worker's own telemetry).

Some series exist only once something happened, so the test makes it happen first: a workflow whose
first workflow task fails and whose activity fails once, a describe of a workflow that does not
exist (a server error), and a minute of idle polling (the server's long poll ends empty)."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from datetime import timedelta

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.runtime import Runtime
from temporalio.service import RPCError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from bench.common import temporal_metrics_url
from metrics import sdk
from metrics.queries import DASHBOARDS, names, panels

pytestmark = [pytest.mark.integration, pytest.mark.long]
CHECKED = ("temporal-server.json", "temporal-sdk.json")
DEADLINE_S = 180.0  # the server ends an idle long poll after a minute
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)[{ ]", re.MULTILINE)
_failed_once: set[str] = set()


@activity.defn(name="dashboard_probe")
async def probe(key: str) -> str:
    if activity.info().attempt == 1:
        raise ApplicationError("the first attempt fails on purpose")
    return key


@workflow.defn(name="DashboardProbe")
class DashboardProbe:
    @workflow.run
    async def run(self, key: str) -> str:
        if key not in _failed_once:  # not an ApplicationError: the workflow task fails and is retried
            _failed_once.add(key)
            raise RuntimeError("the first workflow task fails on purpose")
        return await workflow.execute_activity(probe, key, start_to_close_timeout=timedelta(seconds=30),
                                               retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=100)))


def _needed() -> dict[str, list[str]]:
    """Each metric name the checked dashboards query -> the panels that query it."""
    found: dict[str, list[str]] = {}
    for name in CHECKED:
        for panel in panels(DASHBOARDS / name):
            for metric in sorted({m for expr in panel.exprs for m in names(expr)}):
                found.setdefault(metric, []).append(f"{name} panel {panel.id} {panel.title!r}")
    return found


def _exported(text: str) -> set[str]:
    return set(_SAMPLE.findall(text))


@pytest.mark.timeout(300)
async def test_every_temporal_dashboard_metric_is_exported_by_the_server_or_the_sdk(stack) -> None:
    needed = _needed()
    assert len(needed) >= 25
    telemetry, collector = sdk.buffered()
    registry = CollectorRegistry()
    registry.register(collector)
    client = await Client.connect(stack.temporal_address, namespace=stack.temporal_namespace,
                                  runtime=Runtime(telemetry=telemetry))
    queue, key = f"dash-{uuid.uuid4().hex[:10]}", uuid.uuid4().hex
    server_url = temporal_metrics_url(stack)
    async with Worker(client, task_queue=queue, workflows=[DashboardProbe], activities=[probe],
                      workflow_runner=UnsandboxedWorkflowRunner()):
        assert await client.execute_workflow(DashboardProbe.run, key, id=f"dash-{key}", task_queue=queue) == key
        with pytest.raises(RPCError):
            await client.get_workflow_handle(f"dash-missing-{key}").describe()
        deadline = time.monotonic() + DEADLINE_S
        while True:  # the empty polls come a minute after the queue went quiet
            server = await asyncio.to_thread(lambda: httpx.get(server_url, timeout=10).text)
            exported = _exported(server) | _exported(generate_latest(registry).decode())
            missing = {name: where for name, where in needed.items() if name not in exported}
            if not missing or time.monotonic() > deadline:
                break
            await asyncio.sleep(2)
    # The server's own workers export SDK names too: every SDK panel selects job="worker" (test_dashboards.py).
    assert {"temporal_worker_task_slots_used", "temporal_num_pollers"} <= _exported(server)
    assert not missing, "queried by a panel, exported by neither the Temporal server nor the SDK:\n" + "\n".join(
        f"{name}: {', '.join(where)}" for name, where in sorted(missing.items()))
