"""Task queues by kind of work on the real stack: an io worker process and a media worker process
take a 50-task import to SUCCEEDED through two deploys of the media worker. The first is drained by
SIGTERM (its running steps finish); the second is cut off mid-download (its drain timeout is shorter
than a hung download), and the download resumes on the next media worker from the URL in its
heartbeat. Every task ends with one provider job and a clean ledger."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select
from stack_helpers import assert_ledger_balanced, import_small, run_all, stop_gates_of

from activities.failpoints import ENV as FAILPOINTS_ENV
from control.starting import start_workflows
from devstack.drill import ledger_violations, start_worker, stop_worker, wait_exit, wait_worker_ready
from devstack.ports import pick_ports
from schema import queries
from schema.db import Database
from schema.models import Asset

pytestmark = pytest.mark.integration

TASKS = 50
DRAIN_S = 30  # the first media worker's drain: far more than a 1-s clip's steps need
HUNG = 2  # media slots of the second media worker, each filled with a hung download before its deploy
# Jobs end spread over 1-11 s, so downloads are still to come at each deploy (fetches go before
# transcodes on the media queue, expiry-first-v1: with jobs all ending together, the first media
# worker would have downloaded every output before its deploy).
SPREAD = {"job_seconds": 6.0, "job_jitter": 0.8}


@pytest.mark.timeout(600)
async def test_io_and_media_workers_through_two_media_deploys(stack, client, tmp_path, emulator_jobs):
    queue = f"split-{uuid.uuid4().hex[:10]}"
    summary = import_small(stack, tmp_path, [(f"Q-{i}", f"Queue item {i}", f"Thing {i}") for i in range(TASKS)],
                           duration_s=1)
    db = Database(stack.database_url)
    with db.transaction() as session:
        tasks = queries.list_tasks(session, summary.import_id)
    folder, procs = tmp_path / "workers", []
    (metrics_port,) = pick_ports(1)

    async def worker(role: str, queues: str, **env: str):  # noqa: ANN202 - a started, serving Popen
        proc = start_worker(stack, folder, role, queue, {"REELQUEUE_WORKER_METRICS_PORT": "0", **env}, queues)
        procs.append(proc)
        await wait_worker_ready(proc, folder, role)
        return proc

    httpx.post(f"{stack.emulator_url}/_sim/faults", json=SPREAD, timeout=10).raise_for_status()
    try:
        await worker("io", "io")
        first = await worker("media-1", "media", REELQUEUE_WORKER_DRAIN_S=str(DRAIN_S))
        await start_workflows(client, tasks, summary.import_id, queue)
        await _until(lambda: _downloaded(db, tasks) >= 5, 120, "no output downloaded")
        t0 = time.monotonic()
        first.send_signal(signal.SIGTERM)  # a deploy: stop polling, let running steps finish
        drained = await wait_exit(first, DRAIN_S + 15)
        drain_s = time.monotonic() - t0

        # The next media worker hangs every download after its first chunk (the URL heartbeated), and
        # is deployed away with a 1-s drain: its downloads are cut off and retried elsewhere.
        hung = await worker("media-2", "media", REELQUEUE_WORKER_DRAIN_S="1", REELQUEUE_MEDIA_MAX_ACTIVITIES=str(HUNG),
                            REELQUEUE_WORKER_METRICS_PORT=str(metrics_port), **{FAILPOINTS_ENV: "mid_download=hang"})
        await _until(lambda: _fetches_in_flight(metrics_port) == HUNG, 120, "the hung worker's slots never filled")
        hung.send_signal(signal.SIGTERM)
        cut = await wait_exit(hung, 20)
        await worker("media-3", "media")
        finished = await run_all(client, stack, summary.import_id, queue, timeout=300)
    finally:
        httpx.delete(f"{stack.emulator_url}/_sim/faults", timeout=10)
        for proc in procs:
            await asyncio.to_thread(stop_worker, proc)
        await stop_gates_of(client, queue)
    print(f"\nfirst media worker drained in {drain_s:.1f} s; {HUNG} downloads cut off on the second")

    assert drained == 0 and drain_s < DRAIN_S, (drained, drain_s)  # exited by itself, its steps done
    assert "worker draining" in (folder / "media-1-worker.log").read_text()
    assert cut == 0, (folder / "media-2-worker.log").read_text()[-3000:]
    assert [t.status for t in finished] == ["SUCCEEDED"] * TASKS
    keys = [j["request_key"] for j in emulator_jobs()]
    assert all(sum(k.startswith(t.id) for k in keys) == 1 for t in finished)  # one provider job each
    with db.transaction() as session:
        raws = session.scalars(select(Asset).where(Asset.task_id.in_([t.id for t in tasks]),
                                                   Asset.kind == "RAW_OUTPUT")).all()
    resumed = [a for a in raws if a.meta.get("url_from_heartbeat")]
    assert len(raws) == TASKS and len(resumed) == HUNG  # each cut-off download resumed from its heartbeat
    assert_ledger_balanced(stack, [t.id for t in finished])
    assert ledger_violations(stack, summary.import_id) == []


def _downloaded(db: Database, tasks: list) -> int:
    with db.transaction() as session:
        return len(session.scalars(select(Asset.id).where(Asset.task_id.in_([t.id for t in tasks]),
                                                          Asset.kind == "RAW_OUTPUT")).all())


def _fetches_in_flight(port: int) -> int:
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except httpx.HTTPError:
        return 0
    return int(sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
                   if s.name == "reelqueue_activities_in_flight" and s.labels.get("activity") == "fetch_output"))


async def _until(check, timeout_s: float, what: str) -> None:  # noqa: ANN001 - a sync predicate
    deadline = time.monotonic() + timeout_s
    while not await asyncio.to_thread(check):
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout_s} s")
        await asyncio.sleep(0.3)
