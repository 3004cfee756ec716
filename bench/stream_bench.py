"""Live status at scale (on demand: `make bench-streams`, ARGS="--streams 1000,5000,10000").

Starts Postgres, S3 and a gateway (for its settings and secrets) under a temporary REELQUEUE_HOME (`dev up`'s), then for
each level starts one gateway process as `dev up` does (`python -m gateway`, uvicorn, one process)
and a client process that opens that many `GET /v1/events` streams (tenant-wide, 5 per tenant, so
N/5 tenants) over raw asyncio connections and reads them. Per level it prints:
- memory: the gateway's RSS growth per open stream (RSS after the streams opened minus before);
- gateway CPU while idle (no events) over --idle-s, and under the design's event rate (--rate 42
  events/s: 3 tasks/s x 14 transitions, docs/performance.md "make bench-streams"; one transition per
  transaction, over --active tenants' tasks) over --load-s;
- delivery latency p50/p95/p99 from an event's commit (the writer's COMMIT returned) to the client
  reading it, over every delivery to every stream of the event's tenant;
- Postgres queries a second of the gateway's feed (its reelqueue_event_feed_queries_total: the
  feed's reads, the ticker's key check, the lease renewal), idle and under load, and every
  transaction Postgres counted while idle (pg_stat_database, minus the bench's two reads);
- a new task's first state event (a generation created as the API creates it) to its tenant's streams;
- streams ended as slow consumers (the gateway's reelqueue_event_streams_ended_total{reason=slow}).
`--stack-gateway` measures the `dev up` gateway itself instead of one started per level.
A final JSON line holds every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from decimal import Decimal
from pathlib import Path

import httpx
import psutil

from bench.common import EXAMPLES, bench_stack, input_image, machine, one_second_plan, scrape, total
from bench.webhook_bench import percentile

PER_TENANT = 5


# --- the client process: N streams, read and timed ------------------------------------------------

async def _one(host: str, port: int, key: str, arrivals: list, status: dict, ready: asyncio.Semaphore) -> None:
    try:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(f"GET /v1/events HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
                     f"Accept: text/event-stream\r\n\r\n".encode())
        line = await reader.readline()
        code = line.split()[1].decode() if len(line.split()) > 1 else "none"
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
    except OSError as exc:
        status[type(exc).__name__] = status.get(type(exc).__name__, 0) + 1
        ready.release()
        return
    status[code] = status.get(code, 0) + 1
    ready.release()
    if code != "200":
        writer.close()
        return
    try:
        while line := await reader.readline():
            if line.startswith(b"data: "):  # chunked framing lines and the rest pass by
                arrivals.append((json.loads(line[6:])["event_id"], time.time()))
    except OSError:
        pass
    status["ended"] = status.get("ended", 0) + 1


async def _client(url: str, keys: list[str]) -> None:
    host, port = url.removeprefix("http://").split(":")
    arrivals: list[tuple[int, float]] = []
    status: dict[str, int] = {}
    ready = asyncio.Semaphore(0)
    gate = asyncio.Semaphore(100)  # connects in flight
    tasks = []

    async def opened(key: str) -> None:
        async with gate:
            tasks.append(asyncio.create_task(_one(host, int(port), key, arrivals, status, ready)))
            await ready.acquire()

    t0 = time.perf_counter()
    await asyncio.gather(*(opened(k) for k in keys))
    print(json.dumps({"connected": status, "connect_s": round(time.perf_counter() - t0, 1)}), flush=True)
    loop = asyncio.get_running_loop()
    while (command := (await loop.run_in_executor(None, sys.stdin.readline)).strip()) != "exit":
        if command == "report":
            print(json.dumps({"arrivals": arrivals, "status": status}), flush=True)
            arrivals.clear()


def client_main(url: str, keys_file: str) -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    asyncio.run(_client(url, Path(keys_file).read_text().split()))


# --- the bench process: stack, tenants, gateway, writer, figures -----------------------------------

def _setup(settings, tenants_needed: int, active: int, work: Path,  # noqa: ANN001
           ) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """Tenants with a key each (their keys), one task for each of the first `active` (task ids), and
    an input image for each of the first 10 (tenant, asset id), for new generations."""
    from catalog.plan import load_plan
    from catalog.service import run_import
    from schema import tenants
    from schema.db import Database
    from schema.migrate import upgrade
    from schema.models import Task

    upgrade(settings.database_url)
    db = Database(settings.database_url)
    run = uuid.uuid4().hex[:6]
    keys = []
    with db.transaction() as session:
        for n in range(tenants_needed):
            keys.append(tenants.create_tenant(session, f"sb-{run}-{n}", tenants.TenantLimits(
                credits=Decimal(1000), rate_per_minute=10**6)).api_key)
    (work / "images").mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLES / "images" / "aurora-lamp.png", work / "images" / "lamp.png")
    (work / "shop.csv").write_text("product_id,title,description,image_url,price,currency,category\n"
                                   "B-1,Lamp,A lamp,images/lamp.png,19.99,USD,Home\n")
    (work / "plan.toml").write_text(one_second_plan("streams"))
    plan = load_plan(work / "plan.toml")
    task_ids = []
    for n in range(active):
        summary = run_import(settings, work / "shop.csv", plan, catalog=f"c{n}", tenant=f"sb-{run}-{n}",
                             check_urls=False)
        with db.transaction() as session:
            task_ids.append(session.scalar(Task.__table__.select().with_only_columns(Task.id)
                                           .where(Task.import_id == summary.import_id)))
    return keys, task_ids, [(f"sb-{run}-{n}", input_image(settings, f"sb-{run}-{n}")) for n in range(min(active, 10))]


def _new_tasks(settings, images: list[tuple[str, str]], count: int) -> dict[int, float]:  # noqa: ANN001
    """`count` generations created as `POST /v1/generations` creates them (control.generations, no
    workflow started: no Temporal here), one every 0.5 s: their first state event's id -> commit time."""
    from sqlalchemy import select

    from adapters.providers import build_providers
    from control import generations
    from schema.db import Database
    from schema.models import StateEvent

    db, providers = Database(settings.database_url), build_providers(settings)
    commits = {}
    for n in range(count):
        tenant, asset_id = images[n % len(images)]
        created = generations.create(db, tenant, uuid.uuid4().hex, generations.GenerationBody(
            prompt=f"bench {n}", image_asset_id=asset_id), providers=providers, credits_per_second=1.0)
        committed = time.time()
        with db.transaction() as session:
            commits[session.scalar(select(StateEvent.id).where(
                StateEvent.source == generations.SOURCE,
                StateEvent.source_event_id == f"{created.task_id}:created"))] = committed
        time.sleep(0.5)
    return commits


_EVENT = """
INSERT INTO state_events (task_id, source, source_event_id, event, from_status, to_status, task_version,
                          applied, payload)
VALUES (:task, 'bench', :sid, 'revalidate', 'INVALID', 'VALIDATING', 1, true, '{}'::jsonb) RETURNING id
"""


def _writer(settings, task_ids: list[str], rate: float, seconds: float, commits: dict[int, float],  # noqa: ANN001
            counted: list[int]) -> None:
    """`rate` events a second for `seconds`, one per transaction, each on a random active task."""
    from sqlalchemy import text

    from schema.db import Database

    db = Database(settings.database_url)
    start = time.monotonic()
    n = 0
    while (elapsed := time.monotonic() - start) < seconds:
        with db.transaction() as session:
            event_id = session.scalar(text(_EVENT), {"task": random.choice(task_ids), "sid": uuid.uuid4().hex})
        commits[event_id] = time.time()
        n += 1
        counted[0] += 1
        time.sleep(max(0.0, n / rate - (time.monotonic() - start)))
    del elapsed


def _transactions(settings) -> int:  # noqa: ANN001
    from sqlalchemy import text

    from schema.db import Database

    with Database(settings.database_url).transaction() as session:
        return session.scalar(text("SELECT xact_commit + xact_rollback FROM pg_stat_database "
                                   "WHERE datname = current_database()"))


def _cpu(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def _rss_mb(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 2**20


def _feed_queries(url: str, token: str) -> float:
    return total(scrape(f"{url}/metrics", token), "reelqueue_event_feed_queries_total")


class _Gateway:
    """One `python -m gateway` process (or the stack's own) and its URL."""

    def __init__(self, settings, own: bool, log: Path) -> None:  # noqa: ANN001
        import devstack

        self.proc = None
        if not own:
            self.url, self.pid = settings.gateway_url.rstrip("/"), devstack.running_pid(settings, "gateway")
            return
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.proc = subprocess.Popen([sys.executable, "-m", "gateway", "--host", "127.0.0.1", "--port", str(port)],
                                     env={**os.environ, "REELQUEUE_LOG_LEVEL": "WARNING"},
                                     stdout=log.open("wb"), stderr=subprocess.STDOUT)
        self.url, self.pid = f"http://127.0.0.1:{port}", self.proc.pid
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"gateway did not start: {log.read_text()[-2000:]}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def _level(settings, streams: int, keys: list[str], task_ids: list[str], images: list[tuple[str, str]],  # noqa: ANN001
           args: argparse.Namespace, work: Path) -> dict:
    gateway = _Gateway(settings, not args.stack_gateway, work / f"gateway-{streams}.log")
    client = None
    try:
        warm = httpx.get(f"{gateway.url}/v1/events", headers={"Authorization": f"Bearer {keys[0]}"}, timeout=10)
        assert warm.status_code == 200, warm.text
        time.sleep(1.0)
        rss0 = _rss_mb(gateway.pid)
        keys_file = work / f"keys-{streams}.txt"
        keys_file.write_text("\n".join(k for k in keys[: streams // PER_TENANT] for _ in range(PER_TENANT)))
        client = subprocess.Popen([sys.executable, "-m", "bench.stream_bench", "--client", gateway.url,
                                   str(keys_file)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        opened = json.loads(client.stdout.readline())
        time.sleep(5.0)  # the last joins settle
        rss1 = _rss_mb(gateway.pid)
        # idle: nothing is written
        token = settings.metrics_token
        cpu0, tx0, q0, t0 = _cpu(gateway.pid), _transactions(settings), _feed_queries(gateway.url, token), \
            time.monotonic()
        time.sleep(args.idle_s)
        idle_s = time.monotonic() - t0
        idle_cpu, idle_tx = (_cpu(gateway.pid) - cpu0) / idle_s, (_transactions(settings) - tx0 - 2) / idle_s
        idle_q = (_feed_queries(gateway.url, token) - q0) / idle_s
        # the design's event rate (docs/performance.md, "make bench-streams")
        commits: dict[int, float] = {}
        written = [0]
        cpu0, q0, t0 = _cpu(gateway.pid), _feed_queries(gateway.url, token), time.monotonic()
        writer = threading.Thread(target=_writer, args=(settings, task_ids, args.rate, args.load_s, commits, written))
        writer.start()
        writer.join()
        load_s = time.monotonic() - t0
        load_cpu = (_cpu(gateway.pid) - cpu0) / load_s
        load_q = (_feed_queries(gateway.url, token) - q0) / load_s
        created = _new_tasks(settings, images, args.new_tasks)
        time.sleep(3.0)  # the last deliveries
        client.stdin.write("report\n")
        client.stdin.flush()
        report = json.loads(client.stdout.readline())
        latencies = sorted(t - commits[e] for e, t in report["arrivals"] if e in commits)
        first = sorted(t - created[e] for e, t in report["arrivals"] if e in created)
        expected = len(commits) * PER_TENANT if streams // PER_TENANT >= len(task_ids) else None
        rss2 = _rss_mb(gateway.pid)
        out = {
            "streams": streams, "opened": opened["connected"], "connect_s": opened["connect_s"],
            "rss_before_mb": round(rss0, 1), "rss_open_mb": round(rss1, 1), "rss_after_load_mb": round(rss2, 1),
            "kb_per_stream": round((rss1 - rss0) * 1024 / streams, 1),
            "idle_cpu_pct": round(idle_cpu * 100, 1), "load_cpu_pct": round(load_cpu * 100, 1),
            "idle_pg_tx_per_s": round(idle_tx, 1), "idle_feed_queries_per_s": round(idle_q, 2),
            "load_feed_queries_per_s": round(load_q, 2),
            "events": len(commits), "deliveries": len(latencies), "expected_deliveries": expected,
            "p50_ms": round(percentile(latencies, 50) * 1000, 1) if latencies else None,
            "p95_ms": round(percentile(latencies, 95) * 1000, 1) if latencies else None,
            "p99_ms": round(percentile(latencies, 99) * 1000, 1) if latencies else None,
            "max_ms": round(latencies[-1] * 1000, 1) if latencies else None,
            "new_tasks": len(created), "new_task_deliveries": len(first),
            "new_task_first_event_p50_ms": round(percentile(first, 50) * 1000, 1) if first else None,
            "new_task_first_event_max_ms": round(first[-1] * 1000, 1) if first else None,
            "slow_evicted": total(scrape(f"{gateway.url}/metrics", token), "reelqueue_event_streams_ended_total",
                                  reason="slow"),
            "ended_by_server": report["status"].get("ended", 0),
        }
        print(f"{streams:>6} streams: opened {opened['connected']} in {opened['connect_s']} s; RSS "
              f"{rss0:.0f} -> {rss1:.0f} MB ({out['kb_per_stream']} KB/stream); CPU idle {out['idle_cpu_pct']} %, "
              f"at {args.rate:g} ev/s {out['load_cpu_pct']} %; feed queries/s idle {out['idle_feed_queries_per_s']}, "
              f"load {out['load_feed_queries_per_s']} (Postgres tx/s idle {out['idle_pg_tx_per_s']}); "
              f"delivery p50/p95/p99 {out['p50_ms']}/{out['p95_ms']}/"
              f"{out['p99_ms']} ms ({out['deliveries']} of {expected}); a new task's first event p50/max "
              f"{out['new_task_first_event_p50_ms']}/{out['new_task_first_event_max_ms']} ms "
              f"({out['new_task_deliveries']} deliveries); slow evicted {out['slow_evicted']:g}",
              flush=True)
        return out
    finally:
        if client is not None:
            try:
                client.stdin.write("exit\n")
                client.stdin.flush()
                client.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                client.kill()
        gateway.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--client", nargs=2, metavar=("URL", "KEYS_FILE"), help=argparse.SUPPRESS)
    parser.add_argument("--streams", default="1000,5000,10000", help="comma-separated levels")
    parser.add_argument("--idle-s", type=float, default=30.0)
    parser.add_argument("--load-s", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=42.0,
                        help="events a second (3 tasks/s x 14 transitions; docs/performance.md)")
    parser.add_argument("--active", type=int, default=100, help="tenants whose tasks get the events")
    parser.add_argument("--new-tasks", type=int, default=20, help="generations created after the load, timed")
    parser.add_argument("--stack-gateway", action="store_true", help="measure the `dev up` gateway")
    parser.add_argument("--keep", action="store_true", help="leave the stack running")
    args = parser.parse_args()
    if args.client:
        client_main(*args.client)
        return
    levels = [int(n) for n in args.streams.split(",")]
    with bench_stack("reelqueue-bench-streams-", ["postgres", "s3", "gateway"], keep=args.keep) as settings:
        home = Path(os.environ["REELQUEUE_HOME"])
        t0 = time.perf_counter()
        tenants_needed = max(levels) // PER_TENANT
        keys, task_ids, images = _setup(settings, tenants_needed, min(args.active, tenants_needed), home / "work")
        print(f"setup:   {len(keys)} tenants, {len(task_ids)} with a task, in {time.perf_counter() - t0:.1f} s",
              flush=True)
        results = [_level(settings, n, keys, task_ids, images, args, home) for n in levels]
        print(json.dumps({"levels": results, "rate": args.rate, "idle_s": args.idle_s, "load_s": args.load_s,
                          **machine()}, sort_keys=True))

if __name__ == "__main__":
    main()
