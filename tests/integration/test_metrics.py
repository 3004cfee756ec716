"""/metrics of the real worker process and of the gateway move with the work done."""

from __future__ import annotations

import asyncio
import signal

import pytest
from stack_helpers import import_small, run_all, stop_gates_of

import devstack
from bench.common import scrape, total, worker_metrics_url
from worker import media_slots

pytestmark = pytest.mark.integration


async def test_worker_and_gateway_metrics_follow_the_run(stack, client, tmp_path, emulator_jobs):
    products = [(f"M-{i}", f"Item {i}", f"Thing {i}") for i in range(2)]
    summary = import_small(stack, tmp_path, products, ratios=("9:16", "16:9"))
    devstack.up(stack, services=["worker"])
    settings = devstack.effective_settings(stack)
    worker_url = worker_metrics_url(settings)
    gateway_url = f"{settings.gateway_url}/metrics"
    gateway_before = scrape(gateway_url)
    active_before = total(gateway_before, "reelqueue_provider_active", provider="emulator")  # other tests' tasks
    try:
        worker_before = scrape(worker_url)
        run = asyncio.create_task(run_all(client, settings, summary.import_id, settings.task_queue, timeout=180))
        seen_active = seen_reserved = 0.0
        while not run.done():  # the Postgres gauges while tasks are in flight
            during = await asyncio.to_thread(scrape, gateway_url)
            seen_active = max(seen_active, total(during, "reelqueue_provider_active", provider="emulator"))
            seen_reserved = max(seen_reserved, total(during, "reelqueue_reserved_credit"))
            await asyncio.sleep(0.2)
        tasks = await run
        worker_after = scrape(worker_url)
    finally:
        devstack.kill_service(stack, "worker", signal.SIGTERM)
        await stop_gates_of(client, settings.task_queue)  # the stack's queue has no worker after this test
    gateway_after = scrape(gateway_url)
    assert [t.status for t in tasks] == ["SUCCEEDED"] * 4

    def moved(name: str, **labels: str) -> float:
        return total(worker_after, name, **labels) - total(worker_before, name, **labels)

    jobs = [j for j in emulator_jobs() if j["request_key"].split("-a")[0] in {t.id for t in tasks}]
    assert moved("reelqueue_submits_total", provider="emulator", outcome="accepted") == len(jobs) == 4
    assert moved("reelqueue_activity_seconds_count", activity="make_media", result="ok") == 4
    assert moved("reelqueue_activity_seconds_count", activity="fetch_output", result="ok") == 4
    assert moved("reelqueue_task_state_seconds_count", state="QUEUED") >= 4  # each task left QUEUED
    assert moved("reelqueue_transitions_total", applied="true") >= 4 * 8
    # `dev up`'s worker serves both queues: its io slots (activities and local activities) and its media slots
    assert total(worker_after, "reelqueue_activity_slots") == settings.worker_max_activities + \
        settings.worker_max_local_activities + media_slots(settings)
    assert total(worker_after, "reelqueue_media_utilisation") == 0  # nothing in flight any more
    assert moved("reelqueue_status_calls_total", provider="emulator", result="ok") >= 4  # each ending confirmed

    assert 1 <= seen_active - active_before <= len(tasks)  # this run's tasks holding a slot, at most all four
    assert total(gateway_after, "reelqueue_provider_limit", provider="emulator") == 20  # the configured limit
    assert total(gateway_after, "reelqueue_database_up") == 1
    assert seen_reserved > 0
    webhooks = (total(gateway_after, "reelqueue_webhooks_total", provider="emulator", result="matched")
                - total(gateway_before, "reelqueue_webhooks_total", provider="emulator", result="matched"))
    lags = (total(gateway_after, "reelqueue_webhook_lag_seconds_count", provider="emulator")
            - total(gateway_before, "reelqueue_webhook_lag_seconds_count", provider="emulator"))
    assert webhooks >= 4 and 1 <= lags <= webhooks  # at least each job's ending came by webhook
