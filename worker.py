"""The Temporal worker: runs the workflows and their activities, on the io queue, the media queue or both.

`python worker.py [--queues io,media]` connects with the settings (stack.json / environment), serves
the queues until SIGTERM/SIGINT, then drains (running activities get REELQUEUE_WORKER_DRAIN_S to
finish), and touches a ready file so `reelqueue dev up` knows it is serving. docs/deploy.md, "Task
queues and workers", says which work goes where and how each queue is sized. Beside the io queue
runs the sweeper of the API's start outbox (control/outbox.py), which starts workflows there.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.worker import Worker, WorkerDeploymentConfig

from activities import build_activities
from adapters.temporal_client import connect
from config.settings import Settings, get_settings
from contracts import workflow_api as api
from metrics.activities import ActivityMetrics
from metrics.server import serve_metrics
from workflows.generation import GenerationWorkflow
from workflows.provider_gate import ProviderGateWorkflow
from workflows.renditions import RenditionsWorkflow
from workflows.versioned import VERSIONED_WORKFLOWS

WORKFLOWS = [GenerationWorkflow, ProviderGateWorkflow, RenditionsWorkflow]
QUEUES = (api.IO, api.MEDIA)
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
log = logging.getLogger("reelqueue.worker")


class QueueWorkers:
    """The Workers of one process (one per queue it serves), started and drained together."""

    def __init__(self, workers: list[Worker]):
        self.workers = workers
        self._runs: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> QueueWorkers:
        self._runs = [asyncio.create_task(w.run()) for w in self.workers]
        return self

    async def until(self, stop: asyncio.Event) -> None:
        """Until `stop` is set, or a Worker ends on its own (a fatal error, raised on exit)."""
        waiter = asyncio.create_task(stop.wait())
        await asyncio.wait([waiter, *self._runs], return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()

    async def __aexit__(self, *exc: object) -> None:
        """Every queue stops polling at once; each Worker's running activities get its graceful
        shutdown timeout to finish, then are cancelled (and retried elsewhere)."""
        await asyncio.gather(*(w.shutdown() for w in self.workers))
        ended = await asyncio.gather(*self._runs, return_exceptions=True)
        failed = [e for e in ended if isinstance(e, Exception)]
        if failed and exc[0] is None:
            raise failed[0]


def build_worker(client: Client, settings: Settings, *, task_queue: str | None = None,
                 queues: Sequence[str] = QUEUES) -> QueueWorkers:
    """The Workers for `queues` of the io queue `task_queue` (tests pass a unique one) and its media
    queue. The io Worker runs the workflows and every activity (media steps of workflows started
    before task-queues-v1 are scheduled on the io queue); the media Worker only the media steps."""
    if not settings.worker_id:
        settings = settings.model_copy(update={"worker_id": f"{socket.gethostname()}:{os.getpid()}"})
    queue = task_queue or settings.task_queue
    activities = build_activities(settings, client)
    media = media_slots(settings) if api.MEDIA in queues else 0
    metrics = ActivityMetrics(activity_slots(settings, queues), media)
    drain = timedelta(seconds=settings.worker_drain_s)
    versioning = deployment_config(settings)
    workers = []
    if api.IO in queues:
        workers.append(Worker(client, task_queue=queue, workflows=VERSIONED_WORKFLOWS if versioning else WORKFLOWS,
                              activities=activities, graceful_shutdown_timeout=drain, deployment_config=versioning,
                              **worker_tuning(settings, metrics)))
    if api.MEDIA in queues:
        workers.append(Worker(
            client, task_queue=api.media_queue(queue), activities=media_steps(activities),
            activity_executor=ThreadPoolExecutor(media, thread_name_prefix="media"), max_concurrent_activities=media,
            graceful_shutdown_timeout=drain, interceptors=[metrics], deployment_config=versioning))
    return QueueWorkers(workers)


def deployment_config(settings: Settings) -> WorkerDeploymentConfig | None:
    """Worker Versioning for both queues' Workers (a pinned run's activities go to its own build's media
    workers too); None, unversioned, without REELQUEUE_WORKER_DEPLOYMENT_NAME. Versioned workers register
    workflows/versioned.py's classes, which say how each workflow type moves between builds."""
    if not settings.worker_deployment_name:
        return None
    version = WorkerDeploymentVersion(deployment_name=settings.worker_deployment_name,
                                      build_id=settings.worker_build_id)
    return WorkerDeploymentConfig(version=version, use_worker_versioning=True,
                                  default_versioning_behavior=VersioningBehavior.AUTO_UPGRADE)


def worker_tuning(settings: Settings, metrics: ActivityMetrics | None = None) -> dict[str, Any]:
    """Executor and concurrency options of an io Worker (the pipeline benchmark's engine ceiling runs
    its no-op workflows with exactly these).

    Activities are sync (blocking database and HTTP clients) and run on a thread pool that local
    activities (record_transition) share, so the pool has a thread for every slot of both kinds:
    a full set of slow activities never makes a transition wait for a thread.
    """
    slots, local_slots = settings.worker_max_activities, settings.worker_max_local_activities
    return {
        "activity_executor": ThreadPoolExecutor(slots + local_slots, thread_name_prefix="activity"),
        "max_concurrent_activities": slots,
        "max_concurrent_local_activities": local_slots,
        "max_concurrent_workflow_tasks": settings.worker_max_workflow_tasks,
        "interceptors": [metrics or ActivityMetrics(activity_slots(settings, (api.IO,)), 0)],
    }


def activity_slots(settings: Settings, queues: Sequence[str]) -> int:
    """Every activity this process may run at once, the denominator of slot use: the io queue's
    activities and local activities (the interceptor counts `record_transition` in flight too, so
    leaving its slots out put io workers over 100 %), and the media queue's."""
    io = settings.worker_max_activities + settings.worker_max_local_activities if api.IO in queues else 0
    return io + (media_slots(settings) if api.MEDIA in queues else 0)


def media_steps(activities: list[Callable[..., Any]]) -> list[Callable[..., Any]]:
    """The activities the media queue runs (each activity's name is its method's name)."""
    return [a for a in activities if a.__name__ in api.MEDIA_ACTIVITIES]


def media_slots(settings: Settings) -> int:
    """REELQUEUE_MEDIA_MAX_ACTIVITIES, else one per usable core (at least 2): each ffmpeg is held
    to REELQUEUE_MEDIA_THREADS threads and niced, and a fetch mostly waits on the network."""
    return settings.media_max_activities or max(2, usable_cores())


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity, bounded by a cgroup v2 CPU quota (a
    container's CPU limit, which the affinity does not show)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        quota, period = CGROUP_CPU_MAX.read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return cores


def parse_queues(text: str) -> tuple[str, ...]:
    """`io,media` -> ("io", "media"); ValueError naming what is wrong."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in QUEUES]
    if unknown or not names:
        raise ValueError(f"--queues takes {' and/or '.join(QUEUES)} (comma-separated), not {text!r}")
    return names


async def serve(settings: Settings, queues: Sequence[str] = QUEUES) -> None:
    from metrics import sdk

    sdk.install()  # before the client: the SDK's metrics go to the same /metrics as ours
    client = await connect(settings, wait_s=settings.worker_connect_wait_s)
    workers = build_worker(client, settings, queues=queues)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    metrics_url = serve_metrics(settings.worker_metrics_host, settings.worker_metrics_port)
    served = [w.task_queue for w in workers.workers]
    async with workers:
        _mark_ready(settings)
        log.info("worker serving %s at %s (media slots %d); metrics at %s", ", ".join(served),
                 settings.temporal_address, media_slots(settings) if api.MEDIA in queues else 0, metrics_url or "off")
        loops = [asyncio.create_task(_sweeping_outbox(settings, client, stop)),
                 asyncio.create_task(_backstop(settings, stop))] if api.IO in queues else []
        await workers.until(stop)
        stop.set()  # also when a Worker ended on its own
        await asyncio.gather(*loops)
        log.info("worker draining: running activities have %.0f s to finish", settings.worker_drain_s)
    log.info("worker stopped")


async def _sweeping_outbox(settings: Settings, client: Client, stop: asyncio.Event) -> None:
    """Until `stop`: start the API tasks whose workflow the gateway did not start."""
    from control.outbox import run_sweeper
    from schema.db import Database

    await run_sweeper(Database(settings.database_url), client, settings.task_queue, stop)


async def _backstop(settings: Settings, stop: asyncio.Event) -> None:
    """Until `stop`: the provider backstop's periodic pass (off with REELQUEUE_BACKSTOP_EVERY_S=0)."""
    if not settings.backstop_every_s:
        return
    from datetime import timedelta

    from adapters.providers import build_providers
    from control.provider_backstop import run_periodically
    from schema.db import Database

    await run_periodically(Database(settings.database_url), build_providers(settings), stop,
                           every_s=settings.backstop_every_s, window=timedelta(hours=settings.backstop_window_h))


def _mark_ready(settings: Settings) -> None:
    try:
        from devstack import worker_ready_file
    except ImportError:
        return
    path = worker_ready_file(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(str(os.getpid()))


def main(argv: Sequence[str] | None = None) -> None:
    """Refuses to start (exit 2, naming the variable or option) without the secrets it needs or with
    an unknown queue."""
    from config.secrets import require
    from telemetry.logs import configure_logging
    from telemetry.tracing import setup_tracing

    settings = get_settings()
    configure_logging("worker", settings.log_format, level=settings.log_level, settings=settings)
    parser = argparse.ArgumentParser(description="Serve reelqueue's task queues.")
    parser.add_argument("--queues", default=settings.worker_queues,
                        help="io, media or io,media (default: REELQUEUE_WORKER_QUEUES, else both)")
    args = parser.parse_args(argv)
    try:
        queues = parse_queues(args.queues)
    except ValueError as exc:
        parser.error(str(exc))
    if settings.worker_deployment_name and not settings.worker_build_id:
        parser.error("REELQUEUE_WORKER_DEPLOYMENT_NAME is set: REELQUEUE_WORKER_BUILD_ID must name this build")
    require(settings, "worker")
    setup_tracing("worker")
    asyncio.run(serve(settings, queues))


if __name__ == "__main__":
    main(sys.argv[1:])
