"""Capacity benchmark (on demand: `make bench-capacity`): the design peak on one machine
(docs/performance.md, "make bench-capacity").

Defaults are the design's peak example: tasks arrive at 3/s for 5 minutes, each provider job takes
180 s +/- 20 % (about 540 jobs in flight), the provider allows 720 at once (admission and the
emulator's running limit both set to it). Run once with webhooks on and once off (`--webhooks
both`, the default: the worker restarts between the two on the same stack; about 9 minutes each
at the defaults). `--rate`, `--minutes`, `--provider-seconds`, `--limit` shrink it for a smoke run.

Per mode it reports: completion rate against arrival rate in steady state (completions in the
arrival period shifted by the median task latency, arrival to finished, without the ramps at its
ends, against the arrival rate: a system that keeps up completes at the rate tasks arrive; one
that falls behind, its latency growing, at less), queue age
p50/p95 (time each task spent QUEUED, from its state events), maximum in flight (the gateway's
`reelqueue_provider_active`, sampled, and the emulator's max running), status calls and submits
per task (the worker's /metrics), CPU per process over the mode, the worker's peak RSS, and whether
it kept up (completion >= 0.98 x arrivals, queue age p95 <= 10 s, <= 3 status calls per task, every
task SUCCEEDED). Prints one JSON object; nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

import psutil

from bench.common import (
    EXAMPLES,
    SERVICES,
    cpu_by_process,
    cpu_delta,
    fresh_home,
    machine,
    one_second_plan,
    scrape,
    service_pids,
    total,
    worker_metrics_url,
)

QUEUE_AGE_SQL = """
SELECT extract(epoch FROM next_at - created_at) FROM (
  SELECT e.to_status, e.created_at, lead(e.created_at) OVER (PARTITION BY e.task_id ORDER BY e.id) AS next_at
    FROM state_events e JOIN tasks t ON t.id = e.task_id
   WHERE t.import_id = :import_id AND e.applied) q
 WHERE to_status = 'QUEUED' AND next_at IS NOT NULL
"""


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def import_tasks(settings, home: Path, count: int, name: str) -> tuple[str, list]:  # noqa: ANN001 - Settings
    """`count` tasks of one catalog; the same title for all, so the emulator's render cache serves
    most clips (this benchmark is about orchestration at the provider's pace, not rendering)."""
    from catalog.plan import load_plan
    from catalog.service import run_import
    from schema import queries
    from schema.db import Database

    folder = home / name
    (folder / "images").mkdir(parents=True)
    shutil.copy(EXAMPLES / "images" / "aurora-lamp.png", folder / "images" / "lamp.png")
    lines = ["product_id,title,description,image_url,price,currency,category"]
    lines += [f"C-{i:06d},Capacity item,Generated product,images/lamp.png,19.99,USD,Home" for i in range(count)]
    (folder / "catalog.csv").write_text("\n".join(lines) + "\n")
    (folder / "plan.toml").write_text(one_second_plan("bench-capacity"))
    summary = run_import(settings, folder / "catalog.csv", load_plan(folder / "plan.toml"), catalog=name)
    with Database(settings.database_url).transaction() as session:
        return summary.import_id, queries.list_tasks(session, summary.import_id)


async def arrive(client, tasks: list, import_id: str, queue: str, rate: float) -> list[float]:  # noqa: ANN001
    """Start one workflow every 1/rate seconds (starts run concurrently, so a slow one never
    delays the next arrival); returns each arrival's time."""
    from control.starting import start_workflows

    t0, starts, arrivals = time.time(), [], []
    for i, task in enumerate(tasks):
        await asyncio.sleep(max(0.0, t0 + i / rate - time.time()))
        arrivals.append(time.time())
        starts.append(asyncio.create_task(start_workflows(client, [task], import_id, queue)))
    await asyncio.gather(*starts)
    return arrivals


async def sample(settings, pids: dict, stop: asyncio.Event, every_s: float) -> dict:  # noqa: ANN001
    """The gateway's queue and provider gauges and the worker's RSS, every few seconds."""
    gateway = f"{settings.gateway_url}/metrics"
    worker = psutil.Process(pids["worker"])
    peak = {"provider_active": 0.0, "queue_depth": 0.0, "queue_oldest_age_s": 0.0, "worker_rss_mib": 0.0,
            "fetch_backlog": 0.0, "samples": 0}
    while not stop.is_set():
        metrics = await asyncio.to_thread(scrape, gateway)
        for key, name in (("provider_active", "reelqueue_provider_active"), ("queue_depth", "reelqueue_queue_depth"),
                          ("queue_oldest_age_s", "reelqueue_queue_oldest_age_seconds"),
                          ("fetch_backlog", "reelqueue_fetch_backlog")):
            peak[key] = max(peak[key], total(metrics, name, provider="emulator"))
        peak["worker_rss_mib"] = max(peak["worker_rss_mib"], worker.memory_info().rss / 2**20)
        peak["samples"] += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s)
    return {k: round(v, 1) for k, v in peak.items()}


async def one_mode(settings, home: Path, args: argparse.Namespace, webhooks: bool) -> dict:  # noqa: ANN001
    import httpx
    from sqlalchemy import text

    from adapters.temporal_client import connect
    from schema import queries
    from schema.db import Database

    count = max(1, round(args.rate * args.minutes * 60))
    import_id, tasks = import_tasks(settings, home, count, f"capacity-{'webhooks' if webhooks else 'polling'}")
    client = await connect(settings)
    httpx.delete(f"{settings.emulator_url}/_sim/stats", timeout=10)
    pids = service_pids(settings)
    metrics_before, cpu_before = scrape(worker_metrics_url(settings)), cpu_by_process(pids)
    stop = asyncio.Event()
    sampler = asyncio.create_task(sample(settings, pids, stop, args.sample_s))
    t0 = time.time()
    arrivals = await arrive(client, tasks, import_id, settings.task_queue, args.rate)
    drain_s = args.provider_seconds * (1 + args.jitter) + args.drain_s
    handles = [client.get_workflow_handle(t.workflow_id).result() for t in tasks]
    done, pending = await asyncio.wait([asyncio.ensure_future(h) for h in handles], timeout=drain_s)
    for future in pending:
        future.cancel()
    took = time.time() - t0
    stop.set()
    peaks = await sampler
    cpu = cpu_delta(cpu_before, cpu_by_process(pids))
    metrics_after = scrape(worker_metrics_url(settings))
    emulator = httpx.get(f"{settings.emulator_url}/_sim/stats", timeout=10).json()
    db = Database(settings.database_url)
    with db.transaction() as session:
        by_status = queries.status_counts(session, import_id)
        ended = dict(session.execute(
            text("SELECT id, finished_at FROM tasks WHERE import_id = :i AND finished_at IS NOT NULL"),
            {"i": import_id}).all())
        queue_ages = [float(a) for (a,) in session.execute(text(QUEUE_AGE_SQL), {"import_id": import_id}).all()]

    finished = [f.timestamp() for f in ended.values()]
    latencies = [ended[t.id].timestamp() - at for t, at in zip(tasks, arrivals, strict=True) if t.id in ended]
    # Arrivals over [first, last] complete over the same span shifted by the median latency; the
    # ramps at both ends (half the latency spread each) are left out, so a system that keeps up
    # shows the arrival rate, and one that falls behind (latency growing) less.
    lag = percentile(latencies, 0.5)
    ramp = (percentile(latencies, 0.95) - percentile(latencies, 0.05)) / 2
    window = (arrivals[0] + lag + ramp, arrivals[-1] + lag - ramp)
    span = window[1] - window[0]
    completion = sum(window[0] <= f <= window[1] for f in finished) / span if span > 0 else float("nan")
    arrival_rate = (len(arrivals) - 1) / (arrivals[-1] - arrivals[0]) if len(arrivals) > 1 else float("nan")

    def moved(name: str) -> float:
        return total(metrics_after, name) - total(metrics_before, name)

    status_calls = moved("reelqueue_status_calls_total") / count
    p95 = percentile(queue_ages, 0.95)
    report = {
        "webhooks": webhooks, "tasks": count, "seconds": round(took, 1), "by_status": by_status,
        "arrival_rate": round(arrival_rate, 3),
        "steady_state_window_s": [round(window[0] - t0, 1), round(window[1] - t0, 1)] if span > 0 else None,
        "completion_rate": round(completion, 3) if span > 0 else None,
        "completion_vs_arrival": round(completion / arrival_rate, 3) if span > 0 else None,
        "queue_age_p50_s": round(percentile(queue_ages, 0.5), 2), "queue_age_p95_s": round(p95, 2),
        "task_latency_p50_s": round(lag, 1), "task_latency_p95_s": round(percentile(latencies, 0.95), 1),
        "max_in_flight": peaks["provider_active"], "emulator_max_running": emulator["max_running"],
        "status_calls_per_task": round(status_calls, 2),
        "submits_per_task": round(moved("reelqueue_submits_total") / count, 2),
        "emulator_429s": emulator["refused_429"], "webhooks_sent": emulator["webhooks_sent"],
        "peaks": peaks,
        "cpu_s": {k: round(v, 1) for k, v in sorted(cpu.items())},
        "cpu_share_of_one_core": {k: round(v / took, 3) for k, v in sorted(cpu.items())},
    }
    report["kept_up"] = bool(
        span > 0 and report["completion_vs_arrival"] >= 0.98 and p95 <= 10 and status_calls <= 3
        and by_status.get("SUCCEEDED", 0) == count)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=3.0, help="task arrivals per second")
    parser.add_argument("--minutes", type=float, default=5.0, help="how long tasks arrive")
    parser.add_argument("--provider-seconds", type=float, default=180.0, help="provider job time")
    parser.add_argument("--jitter", type=float, default=0.2, help="job time spread (0.2: +/-20 %%)")
    parser.add_argument("--limit", type=int, default=720, help="provider concurrency (admission and emulator)")
    parser.add_argument("--webhooks", choices=["on", "off", "both"], default="both")
    parser.add_argument("--drain-s", type=float, default=120.0, help="wait past arrivals + longest job time")
    parser.add_argument("--sample-s", type=float, default=5.0, help="gauge sampling interval")
    parser.add_argument("--keep", action="store_true", help="leave the stack running")
    args = parser.parse_args()

    import httpx

    import devstack
    from config.settings import Settings

    home = fresh_home("reelqueue-bench-capacity-")
    os.environ["REELQUEUE_EMULATOR_RENDER"] = "fast"
    os.environ["REELQUEUE_EMULATOR_MAX_RUNNING"] = str(args.limit)
    os.environ["REELQUEUE_EMULATOR_MAX_QUEUED"] = str(args.limit * 2)
    os.environ["REELQUEUE_PROVIDER_LIMITS"] = json.dumps({"emulator": {"max_concurrent": args.limit}})
    modes = {"on": [True], "off": [False], "both": [True, False]}[args.webhooks]
    reports = []
    settings = Settings()
    try:
        for webhooks in modes:
            os.environ["REELQUEUE_WEBHOOKS"] = str(webhooks).lower()
            if reports:  # the worker reads REELQUEUE_WEBHOOKS at start
                devstack.restart_service(Settings(), "worker")
            else:
                devstack.up(Settings(), services=SERVICES)
            settings = devstack.effective_settings(Settings())
            httpx.post(f"{settings.emulator_url}/_sim/faults", timeout=10, json={
                "job_seconds": args.provider_seconds, "job_jitter": args.jitter,
                "max_running": args.limit, "max_queued": args.limit * 2})
            reports.append(asyncio.run(one_mode(settings, home, args, webhooks)))
    finally:
        if not args.keep:
            devstack.down(settings)
            shutil.rmtree(home, ignore_errors=True)
    print(json.dumps({"scenario": {k: getattr(args, k) for k in ("rate", "minutes", "provider_seconds", "jitter",
                                                                  "limit")},
                      "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
                      "modes": reports, "machine": machine()}, indent=2))


if __name__ == "__main__":
    main()
