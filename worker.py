"""The Temporal worker: runs GenerationWorkflow and its activities.

`python worker.py` connects with the settings (stack.json / environment), serves the task queue
until SIGTERM/SIGINT, and touches a ready file so `reelqueue dev up` knows it is serving. Beside it
runs the sweeper of the API's start outbox (control/outbox.py), on the same task queue.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from activities import build_activities
from adapters.temporal_client import connect
from config.settings import Settings, get_settings
from metrics.activities import ActivityMetrics
from metrics.server import serve_metrics
from workflows.generation import GenerationWorkflow
from workflows.provider_gate import ProviderGateWorkflow
from workflows.renditions import RenditionsWorkflow

log = logging.getLogger("reelqueue.worker")


def build_worker(client: Client, settings: Settings, *, task_queue: str | None = None) -> Worker:
    """A worker for the generation task queue; tests pass their own unique queue.

    Activities are sync (blocking database and HTTP clients) and run on a thread pool that local
    activities (record_transition) share, so the pool has a thread for every slot of both kinds:
    a full set of slow activities never makes a transition wait for a thread.
    """
    if not settings.worker_id:
        settings = settings.model_copy(update={"worker_id": f"{socket.gethostname()}:{os.getpid()}"})
    return Worker(
        client,
        task_queue=task_queue or settings.task_queue,
        workflows=[GenerationWorkflow, ProviderGateWorkflow, RenditionsWorkflow],
        activities=build_activities(settings, client),
        **worker_tuning(settings),
    )


def worker_tuning(settings: Settings) -> dict[str, Any]:
    """Executor and concurrency options of a worker (the pipeline benchmark's engine ceiling runs
    its no-op workflows with exactly these)."""
    slots, local_slots = settings.worker_max_activities, settings.worker_max_local_activities
    return {
        "activity_executor": ThreadPoolExecutor(slots + local_slots, thread_name_prefix="activity"),
        "max_concurrent_activities": slots,
        "max_concurrent_local_activities": local_slots,
        "max_concurrent_workflow_tasks": settings.worker_max_workflow_tasks,
        "interceptors": [ActivityMetrics(slots)],
    }


async def serve(settings: Settings) -> None:
    from metrics import sdk

    sdk.install()  # before the client: the SDK's metrics go to the same /metrics as ours
    client = await connect(settings)
    worker = build_worker(client, settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    metrics_url = serve_metrics(settings.worker_metrics_host, settings.worker_metrics_port)
    async with worker:
        _mark_ready(settings)
        log.info("worker serving task queue %s at %s; metrics at %s", settings.task_queue,
                 settings.temporal_address, metrics_url or "off")
        await _sweeping_outbox(settings, client, stop)


async def _sweeping_outbox(settings: Settings, client: Client, stop: asyncio.Event) -> None:
    """Until `stop`: start the API tasks whose workflow the gateway did not start."""
    from control.outbox import run_sweeper
    from schema.db import Database

    await run_sweeper(Database(settings.database_url), client, settings.task_queue, stop)


def _mark_ready(settings: Settings) -> None:
    try:
        from devstack import worker_ready_file
    except ImportError:
        return
    path = worker_ready_file(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(str(os.getpid()))


def main() -> None:
    """Refuses to start (exit 2, naming the variable) without the secrets it needs."""
    from config.secrets import require
    from telemetry.logs import configure_logging
    from telemetry.tracing import setup_tracing

    settings = get_settings()
    configure_logging("worker", settings.log_format, level=settings.log_level, settings=settings)
    require(settings, "worker")
    setup_tracing("worker")
    asyncio.run(serve(settings))


if __name__ == "__main__":
    main()
