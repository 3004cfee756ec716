"""Webhook path benchmark (on demand: `make bench-webhooks ARGS="--tasks 200 --webhooks 2000"`).

Starts its own Postgres, S3, Temporal and gateway under a temporary REELQUEUE_HOME (the gateway
gets a fresh emulator webhook secret through REELQUEUE_EMULATOR_WEBHOOK_SECRET, the variable
`dev up` would otherwise fill from the emulator's settings; no emulator process is needed), and
prints figures; nothing here is a pass/fail test.

Set-up: N tasks imported (plan of 8 combinations, URL checks off), their GenerationWorkflows
started on a task queue no worker polls (they exist and take signals, nothing runs them), and
`attempts` rows with provider job ids (several attempts per task, one job each), so the gateway
matches each event by job id.

The gateway signals each (job, status) once; later events repeating a status already signaled are
stored and answered without a signal (docs/architecture.md, "Provider webhooks"). So the load is
built from status changes: every job gets queued, throttled, running, succeeded, each with its own
webhook id, and every measured request is news the gateway must signal. Bodies are the emulator's
JobOut JSON, signed with emulator.signing.webhook_headers, POSTed to {gateway_url}/webhooks/emulator
over keep-alive connections. The gateway answers after Temporal accepted the signal and the inbox
row was marked, so latency is "webhook in -> signal delivered".

Figures: per concurrency level (M deliveries each, default 2,000 at 1, 8 and 32) requests/s,
p50/p95/p99, non-2xx and the CPU each process used; a chatty phase (progress reports repeating
"running": stored, not signaled) for the store-only path; the gateway's signal call alone (its
TemporalSignaler from here, to a spare workflow) for Temporal's share; delivery checked in every
workflow's history (each news event signaled exactly once, no repeat signaled) against the inbox
rows; duplicates (same webhook ids, re-signed) that should add no signal. A final JSON line
carries the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import resource
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.common import bench_stack
from bench.import_bench import PLAN as EIGHT_COMBINATIONS
from bench.import_bench import write_catalog

NO_WORKER_QUEUE = "bench-webhooks-no-worker"
CLK_TCK = os.sysconf("SC_CLK_TCK")


STATUSES = ("queued", "throttled", "running", "succeeded")  # each one news to the gateway, in order


@dataclass(frozen=True)
class Job:
    task_id: str
    workflow_id: str
    attempt_no: int
    job_id: str
    request_key: str
    model: str
    aspect_ratio: str
    duration_s: float


@dataclass(frozen=True)
class Delivery:
    msg_id: str
    workflow_id: str
    job_id: str
    status: str
    news: bool  # the first event of its (job, status): the gateway signals it
    body: bytes


# --- CPU accounting: utime + stime of a process tree (children reaped by it included) -------------

def _proc_table() -> dict[int, tuple[int, float]]:
    """pid -> (ppid, CPU seconds incl. reaped children) for every process we can read."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                raw = handle.read().decode(errors="replace")
        except OSError:
            continue
        fields = raw[raw.rfind(")") + 2:].split()  # after "pid (comm) ": state ppid ...
        ppid = int(fields[1])
        ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime stime cutime cstime
        table[int(entry)] = (ppid, ticks / CLK_TCK)
    return table


def tree_cpu(roots: dict[str, int | None]) -> dict[str, float]:
    """CPU seconds used so far by each named process and its descendants; `bench` is this process."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out = {}
    for name, root in roots.items():
        total, stack = 0.0, [root] if root else []
        while stack:
            pid = stack.pop()
            total += table.get(pid, (0, 0.0))[1]
            stack.extend(children.get(pid, []))
        out[name] = total
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out["bench"] = usage.ru_utime + usage.ru_stime
    return out


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: round(after[name] - before.get(name, 0.0), 2) for name in after}


# --- set-up --------------------------------------------------------------------------------------

def import_tasks(settings, home: Path, tasks: int) -> str:  # noqa: ANN001 - config.Settings
    from catalog.plan import load_plan
    from catalog.service import run_import

    catalog, plan_path = home / "catalog.csv", home / "plan.toml"
    write_catalog(catalog, -(-tasks // 8))
    plan_path.write_text(EIGHT_COMBINATIONS)
    t0 = time.perf_counter()
    summary = run_import(settings, catalog, load_plan(plan_path), catalog="bench-webhooks", check_urls=False)
    print(f"import:       {summary.tasks:,} tasks in {time.perf_counter() - t0:.1f} s")
    return summary.import_id


async def park_workflows(settings, import_id: str, tasks: int, jobs: int) -> list[Job]:  # noqa: ANN001
    """Start N workflows on a queue nobody polls; record `jobs` attempts with a job id, round-robin
    over the tasks (attempt 1 for each task, then 2, ...)."""
    from sqlalchemy import select

    from activities.submit import request_key
    from adapters.temporal_client import connect
    from control.starting import start_workflows
    from schema import queries
    from schema.db import Database
    from schema.models import Attempt, Task

    db = Database(settings.database_url)
    with db.transaction() as session:
        rows = session.execute(
            select(*queries.START_COLUMNS, Task.model, Task.duration_s)
            .where(Task.import_id == import_id).order_by(Task.id).limit(tasks)
        ).all()
    client = await connect(settings)
    t0 = time.perf_counter()
    counts = await start_workflows(client, rows, import_id, NO_WORKER_QUEUE)
    started_s = time.perf_counter() - t0
    if counts["started"] != len(rows):
        raise SystemExit(f"expected {len(rows)} workflows started, got {counts}")
    out = []
    for k in range(jobs):
        r, attempt_no = rows[k % len(rows)], k // len(rows) + 1
        out.append(Job(task_id=r.id, workflow_id=r.workflow_id, attempt_no=attempt_no, job_id=f"job_{uuid.uuid4().hex}",
                       request_key=request_key(r.id, attempt_no), model=r.model, aspect_ratio=r.aspect_ratio,
                       duration_s=float(r.duration_s)))
    with db.transaction() as session:  # what submits that got their answers would have written
        now = datetime.now(UTC)
        session.add_all(Attempt(task_id=j.task_id, attempt_no=j.attempt_no, provider="emulator", model=j.model,
                                request_key=j.request_key, provider_job_id=j.job_id, submit_state="ACKED",
                                request_fingerprint="bench-webhooks", provider_status="queued",
                                sent_at=now, call_ended_at=now, acked_at=now) for j in out)
    print(f"workflows:    {len(rows):,} started on {NO_WORKER_QUEUE!r} in {started_s:.1f} s "
          f"({len(rows) / started_s:,.0f}/s); {len(out):,} attempts with a job id recorded "
          f"(up to {-(-len(out) // len(rows))} per task)")
    return out


def _body(job: Job, status: str, progress: float, updated: datetime) -> bytes:
    """The job JSON as the emulator's `view` gives it (outputs and usage once succeeded)."""
    from adapters.providers.emulator_api import JobOut, OutputOut, UsageOut

    created = updated - timedelta(seconds=30)
    out = JobOut(id=job.job_id, request_key=job.request_key, model=job.model, aspect_ratio=job.aspect_ratio,
                 duration_s=job.duration_s, status=status, progress=progress, created_at=created, updated_at=updated)
    if status == "succeeded":
        expires = int(time.time()) + 86400
        out.output = [OutputOut(url=f"http://127.0.0.1:8900/files/{job.job_id}/{expires}-{uuid.uuid4().hex[:40]}.mp4",
                                expires_at=datetime.fromtimestamp(expires, UTC))]
        out.usage = UsageOut(seconds=job.duration_s, cost=round(job.duration_s * 0.5, 2))
    return out.model_dump_json().encode()


def status_changes(jobs: list[Job], total: int) -> list[Delivery]:
    """Up to `total` events: every job's queued, throttled, running, succeeded, one round per status
    over all the jobs (neighbours never share a job, or its advisory lock)."""
    base = datetime.now(UTC)
    out = []
    for rnd, status in enumerate(STATUSES):
        progress = {"running": 0.5, "succeeded": 1.0}.get(status, 0.0)
        for job in jobs:
            body = _body(job, status, progress, base + timedelta(seconds=rnd))
            out.append(Delivery(f"msg_{uuid.uuid4().hex}", job.workflow_id, job.job_id, status, True, body))
    return out[:total]


def progress_reports(jobs: list[Job], total: int) -> list[Delivery]:
    """`total` "running" events with rising progress for jobs whose running status was signaled."""
    base = datetime.now(UTC)
    out = []
    for i in range(total):
        job, rnd = jobs[i % len(jobs)], i // len(jobs) + 1
        body = _body(job, "running", min(0.99, 0.5 + rnd / 200), base + timedelta(seconds=10 + rnd))
        out.append(Delivery(f"msg_{uuid.uuid4().hex}", job.workflow_id, job.job_id, "running", False, body))
    return out


# --- load ----------------------------------------------------------------------------------------

def percentile(sorted_ms: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_ms:
        return float("nan")
    rank = max(1, math.ceil(q / 100 * len(sorted_ms)))
    return sorted_ms[min(rank, len(sorted_ms)) - 1]


async def send_all(url: str, secret: str, deliveries: list[Delivery], concurrency: int) -> dict:
    """POST every delivery, `concurrency` in flight; wall time, rate, latency percentiles, statuses."""
    import httpx

    from emulator.signing import webhook_headers

    latencies: list[float] = []
    statuses: Counter[str] = Counter()
    pending = iter(deliveries)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async with httpx.AsyncClient(timeout=30, limits=limits) as http:
        async def sender() -> None:
            for d in pending:  # the shared iterator hands each delivery to one sender
                headers = {"content-type": "application/json", **webhook_headers(secret, d.msg_id, d.body)}
                t0 = time.perf_counter()
                try:
                    resp = await http.post(url, content=d.body, headers=headers)
                    statuses[str(resp.status_code)] += 1
                except httpx.HTTPError as exc:
                    statuses[type(exc).__name__] += 1
                latencies.append((time.perf_counter() - t0) * 1000)

        t0 = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(concurrency)))
        wall = time.perf_counter() - t0
    lat = sorted(latencies)
    return {
        "concurrency": concurrency,
        "requests": len(deliveries),
        "wall_s": round(wall, 2),
        "rps": round(len(deliveries) / wall, 1),
        "p50_ms": round(percentile(lat, 50), 1),
        "p95_ms": round(percentile(lat, 95), 1),
        "p99_ms": round(percentile(lat, 99), 1),
        "max_ms": round(lat[-1], 1) if lat else None,
        "non_2xx": sum(n for code, n in statuses.items() if not code.startswith("2")),
        "statuses": dict(statuses),
    }


async def temporal_probe(settings, count: int) -> dict:  # noqa: ANN001
    """The gateway's signal call alone (same class, same request shape), concurrency 1, to a spare
    workflow: Temporal's share of one webhook request."""
    from adapters.temporal_client import connect
    from contracts.messages import GenerationInput, ProviderUpdate
    from contracts.provider import JobStatus
    from contracts.workflow_api import WORKFLOW_NAME
    from gateway.signals import TemporalSignaler

    client = await connect(settings)
    workflow_id = f"bench-probe-{uuid.uuid4().hex[:8]}"
    await client.start_workflow(WORKFLOW_NAME, GenerationInput(task_id="bench-probe"), id=workflow_id,
                                task_queue=NO_WORKER_QUEUE)
    signaler = TemporalSignaler(lambda: connect(settings))
    lat = []
    for i in range(count):
        update = ProviderUpdate(job_id="job_probe", status=JobStatus.RUNNING, raw_status="running",
                                progress=i / count, event_id=f"probe-{i}", observed_at=datetime.now(UTC),
                                verified=True)
        t0 = time.perf_counter()
        await signaler.signal(workflow_id, update, str(uuid.uuid4()))
        lat.append((time.perf_counter() - t0) * 1000)
    await client.get_workflow_handle(workflow_id).terminate("bench probe over")
    lat.sort()
    return {"signals": count, "p50_ms": round(percentile(lat, 50), 1), "p95_ms": round(percentile(lat, 95), 1),
            "p99_ms": round(percentile(lat, 99), 1)}


# --- verification --------------------------------------------------------------------------------

async def signaled_events(settings, workflow_ids: list[str]) -> dict[str, list[str]]:  # noqa: ANN001
    """Per workflow, the event id of every provider_update signal in its history."""
    from adapters.temporal_client import connect
    from contracts.messages import ProviderUpdate
    from contracts.workflow_api import SIGNAL_PROVIDER_UPDATE

    client = await connect(settings)
    found: dict[str, list[str]] = {}
    pending = iter(workflow_ids)

    async def reader() -> None:
        for wid in pending:
            history = await client.get_workflow_handle(wid).fetch_history()
            ids = []
            for e in history.events:
                if not e.HasField("workflow_execution_signaled_event_attributes"):
                    continue
                attrs = e.workflow_execution_signaled_event_attributes
                if attrs.signal_name == SIGNAL_PROVIDER_UPDATE:
                    (update,) = await client.data_converter.decode(attrs.input.payloads, [ProviderUpdate])
                    ids.append(update.event_id)
            found[wid] = ids

    await asyncio.gather(*(reader() for _ in range(8)))
    return found


def compare(sent: list[Delivery], found: dict[str, list[str]]) -> dict:
    """Sent events of the checked workflows against the signals in their histories."""
    mine = [d for d in sent if d.workflow_id in found]
    news = {d.msg_id for d in mine if d.news}
    repeats = {d.msg_id for d in mine if not d.news}
    by_id = {d.msg_id: d for d in mine}
    seen = Counter(m for ids in found.values() for m in ids)
    per_status = Counter((by_id[m].job_id, by_id[m].status) for m in seen if m in by_id)
    out = {
        "workflows_checked": len(found),
        "news_sent": len(news),
        "repeats_sent": len(repeats),
        "signals_found": sum(seen.values()),
        "news_missing": len(news - set(seen)),
        "repeats_signaled": len(repeats & set(seen)),
        "event_signaled_twice": sum(n - 1 for n in seen.values() if n > 1),
        "job_status_signaled_twice": sum(n - 1 for n in per_status.values() if n > 1),
        "unexpected": sum(n for m, n in seen.items() if m not in by_id),
    }
    out["as_designed"] = not any(out[k] for k in ("news_missing", "repeats_signaled", "event_signaled_twice",
                                                  "job_status_signaled_twice", "unexpected"))
    return out


def inbox_counts(settings, job_ids: list[str]) -> dict[str, int]:  # noqa: ANN001
    from sqlalchemy import func, select

    from schema.db import Database
    from schema.models import ProviderEvent

    with Database(settings.database_url).transaction() as session:
        rows, matched, signaled = session.execute(
            select(func.count(), func.count().filter(ProviderEvent.state == "matched"),
                   func.count(ProviderEvent.signaled_at))
            .where(ProviderEvent.provider == "emulator", ProviderEvent.provider_job_id.in_(job_ids))
        ).one()
    return {"rows": rows, "matched": matched, "signaled": signaled}


# --- main ----------------------------------------------------------------------------------------

def print_level(label: str, r: dict) -> None:
    cpu = r["cpu_s"]
    per_req = {name: round(1000 * v / r["requests"], 2) for name, v in cpu.items()}
    print(f"{label:<13} {r['requests']:>6,} requests in {r['wall_s']:6.2f} s = {r['rps']:7.1f} req/s; "
          f"p50 {r['p50_ms']:.1f} ms, p95 {r['p95_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, "
          f"max {r['max_ms']:.1f} ms; non-2xx {r['non_2xx']} {r['statuses']}")
    print("              CPU s: " + ", ".join(f"{n} {v:.2f}" for n, v in cpu.items())
          + f" (total {sum(cpu.values()):.2f} in {r['wall_s']:.2f} s wall); per request ms: "
          + ", ".join(f"{n} {v:.2f}" for n, v in per_req.items()))


async def measured(url: str, secret: str, deliveries: list[Delivery], concurrency: int,
                   pids: dict[str, int | None]) -> dict:
    before = tree_cpu(pids)
    r = await send_all(url, secret, deliveries, concurrency)
    r["cpu_s"] = cpu_delta(before, tree_cpu(pids))
    return r


async def bench(settings, home: Path, args: argparse.Namespace) -> dict:  # noqa: ANN001
    import devstack

    levels = [int(c) for c in args.concurrency.split(",")]
    per_level_jobs = -(-args.webhooks // len(STATUSES))
    warm_jobs = 16
    import_id = import_tasks(settings, home, args.tasks)
    jobs = await park_workflows(settings, import_id, args.tasks, warm_jobs + per_level_jobs * len(levels))
    url, secret = settings.webhook_url("emulator"), settings.emulator_webhook_secret
    pids = {name: devstack.running_pid(settings, name) for name in ("gateway", "postgres", "temporal")}
    sent: list[Delivery] = []

    # The gateway builds its engine and Temporal client on the first webhook: not measured.
    warmup = status_changes(jobs[:warm_jobs], warm_jobs * len(STATUSES))
    w = await send_all(url, secret, warmup, 4)
    sent += warmup
    print(f"warm-up:      {w['requests']} requests, non-2xx {w['non_2xx']} {w['statuses']}")
    print(f"load:         per level {args.webhooks:,} status changes of {per_level_jobs:,} fresh jobs "
          f"({'/'.join(STATUSES)}), each one a signal")

    results = []
    for n, concurrency in enumerate(levels):
        level_jobs = jobs[warm_jobs + n * per_level_jobs:warm_jobs + (n + 1) * per_level_jobs]
        batch = status_changes(level_jobs, args.webhooks)
        r = await measured(url, secret, batch, concurrency, pids)
        sent += batch
        print_level(f"c={concurrency}", r)
        results.append(r)

    chatty = None
    if args.repeats:
        first_level = jobs[warm_jobs:warm_jobs + per_level_jobs]
        batch = progress_reports(first_level, args.repeats)
        chatty = await measured(url, secret, batch, args.repeat_concurrency, pids)
        sent += batch
        print_level(f"repeats c={args.repeat_concurrency}", chatty)
        print("              (progress reports repeating an already signaled 'running': stored, not signaled)")

    probe = await temporal_probe(settings, args.probe) if args.probe > 0 else None
    if probe:
        print(f"temporal:     {probe['signals']} direct signals (the gateway's TemporalSignaler, c=1): "
              f"p50 {probe['p50_ms']} ms, p95 {probe['p95_ms']} ms, p99 {probe['p99_ms']} ms")

    workflow_ids = sorted({j.workflow_id for j in jobs})
    if args.verify_sample and args.verify_sample < len(workflow_ids):
        workflow_ids = random.Random(7).sample(workflow_ids, args.verify_sample)
    t0 = time.perf_counter()
    found = await signaled_events(settings, workflow_ids)
    delivery = compare(sent, found)
    delivery["history_read_s"] = round(time.perf_counter() - t0, 2)
    news_total = sum(1 for d in sent if d.news)
    inbox = inbox_counts(settings, [j.job_id for j in jobs])
    print(f"delivery:     {delivery['workflows_checked']} histories hold {delivery['signals_found']:,} provider_update "
          f"signals; {delivery['news_sent']:,} status changes and {delivery['repeats_sent']:,} repeats were sent to "
          f"them: news missing {delivery['news_missing']}, repeats signaled {delivery['repeats_signaled']}, "
          f"event signaled twice {delivery['event_signaled_twice']}, (job, status) signaled twice "
          f"{delivery['job_status_signaled_twice']}, unexpected {delivery['unexpected']} -> "
          f"{'as designed' if delivery['as_designed'] else 'NOT as designed'} (read in {delivery['history_read_s']} s)")
    print(f"inbox:        {inbox['rows']:,} rows for the bench's jobs ({len(sent):,} unique events sent), "
          f"{inbox['matched']:,} matched, {inbox['signaled']:,} marked signaled ({news_total:,} status changes sent)")

    duplicates = await send_duplicates(settings, url, secret, sent, args.duplicates, inbox["rows"], jobs)
    return {"tasks": args.tasks, "jobs": len(jobs), "webhooks_per_level": args.webhooks, "warmup": len(warmup),
            "levels": [{k: v for k, v in r.items() if k != "statuses"} for r in results],
            "repeats": {k: v for k, v in chatty.items() if k != "statuses"} if chatty else None,
            "temporal_signal_probe": probe, "delivery": delivery, "inbox": inbox, "duplicates": duplicates}


async def send_duplicates(settings, url: str, secret: str, sent: list[Delivery], count: int,  # noqa: ANN001
                          rows_before: int, jobs: list[Job]) -> dict:
    """Re-send `count` delivered events (same webhook id and body, signed afresh), half of them
    status changes (signaled), half repeats (stored only) when there were repeats."""
    rng = random.Random(11)
    news = [d for d in sent if d.news]
    repeats = [d for d in sent if not d.news]
    n_rep = min(len(repeats), count // 2)
    dupes = rng.sample(news, min(len(news), count - n_rep)) + rng.sample(repeats, n_rep)
    wids = sorted({d.workflow_id for d in dupes})
    before = {m for ids in (await signaled_events(settings, wids)).values() for m in ids}
    d = await send_all(url, secret, dupes, 8)
    after = Counter(m for ids in (await signaled_events(settings, wids)).values() for m in ids)
    added = set(after) - before
    out = {
        "sent": d["requests"], "of_signaled": len(dupes) - n_rep, "of_repeats": n_rep, "non_2xx": d["non_2xx"],
        "p50_ms": d["p50_ms"], "p95_ms": d["p95_ms"],
        "signals_added": sum(after.values()) - len(before),
        "signals_added_by_dupes_of_signaled": sum(1 for x in dupes if x.news and x.msg_id in added),
        "signals_added_by_dupes_of_repeats": sum(1 for x in dupes if not x.news and x.msg_id in added),
        "inbox_rows_added": inbox_counts(settings, [j.job_id for j in jobs])["rows"] - rows_before,
    }
    print(f"duplicates:   {out['sent']} re-sent (same webhook ids, re-signed), c=8: {out['of_signaled']} of signaled "
          f"status changes, {out['of_repeats']} of stored-only repeats; non-2xx {out['non_2xx']}, p50 {out['p50_ms']} "
          f"ms, p95 {out['p95_ms']} ms; signals added {out['signals_added']} "
          f"({out['signals_added_by_dupes_of_signaled']} by copies of signaled events, "
          f"{out['signals_added_by_dupes_of_repeats']} by copies of repeats); "
          f"inbox rows added {out['inbox_rows_added']}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=200, help="tasks, each with a running workflow and a job id")
    parser.add_argument("--webhooks", type=int, default=2_000, help="signed deliveries per concurrency level")
    parser.add_argument("--concurrency", default="1,8,32", help="comma-separated levels, each its own events")
    parser.add_argument("--repeats", type=int, default=1_000,
                        help="progress reports repeating a signaled status (stored, not signaled); 0: none")
    parser.add_argument("--repeat-concurrency", type=int, default=8)
    parser.add_argument("--duplicates", type=int, default=100, help="deliveries re-sent at the end")
    parser.add_argument("--probe", type=int, default=200, help="direct Temporal signals timed (0: none)")
    parser.add_argument("--verify-sample", type=int, default=0,
                        help="read this many workflows' histories (default 0: all)")
    parser.add_argument("--keep", action="store_true", help="leave the stack running")
    args = parser.parse_args()

    from emulator.config import WEBHOOK_SECRET_ENV, new_webhook_secret

    os.environ.setdefault(WEBHOOK_SECRET_ENV, new_webhook_secret())  # the gateway inherits it
    with bench_stack("reelqueue-bench-", ["postgres", "s3", "temporal", "gateway"], keep=args.keep) as settings:
        figures = asyncio.run(bench(settings, Path(os.environ["REELQUEUE_HOME"]), args))
        print(json.dumps(figures, sort_keys=True))

if __name__ == "__main__":
    main()
