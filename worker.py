"""The Temporal worker: runs GenerationWorkflow and its activities.

`python worker.py` connects with the settings (stack.json / environment), serves the task queue
until SIGTERM/SIGINT, and touches a ready file so `reelqueue dev up` knows it is serving.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from concurrent.futures import ThreadPoolExecutor

from temporalio.client import Client
from temporalio.worker import Worker

from activities import build_activities
from adapters.temporal_client import connect
from config.settings import Settings, get_settings
from workflows.generation import GenerationWorkflow
from workflows.provider_gate import ProviderGateWorkflow
from workflows.renditions import RenditionsWorkflow

MAX_CONCURRENT_ACTIVITIES = 8


def build_worker(client: Client, settings: Settings, *, task_queue: str | None = None) -> Worker:
    """A worker for the generation task queue; tests pass their own unique queue."""
    if not settings.worker_id:
        settings = settings.model_copy(update={"worker_id": f"{socket.gethostname()}:{os.getpid()}"})
    return Worker(
        client,
        task_queue=task_queue or settings.task_queue,
        workflows=[GenerationWorkflow, ProviderGateWorkflow, RenditionsWorkflow],
        activities=build_activities(settings, client),
        activity_executor=ThreadPoolExecutor(MAX_CONCURRENT_ACTIVITIES),
        max_concurrent_activities=MAX_CONCURRENT_ACTIVITIES,
    )


async def serve(settings: Settings) -> None:
    client = await connect(settings.temporal_address, settings.temporal_namespace)
    worker = build_worker(client, settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        _mark_ready(settings)
        print(f"worker serving task queue {settings.task_queue} at {settings.temporal_address}", flush=True)
        await stop.wait()


def _mark_ready(settings: Settings) -> None:
    try:
        from devstack import worker_ready_file
    except ImportError:
        return
    path = worker_ready_file(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(str(os.getpid()))


if __name__ == "__main__":
    asyncio.run(serve(get_settings()))
