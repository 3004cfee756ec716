"""Tenant API create benchmark (on demand: `make bench-api ARGS="--creates 500"`).

Starts its own Postgres, S3, Temporal and gateway (the `dev up` gateway process, `python -m gateway`)
under a temporary REELQUEUE_HOME, makes a tenant with its key and a stored input image, then POSTs
`/v1/generations` with a new Idempotency-Key each, at concurrency 1, 8 and 32 over keep-alive
connections. A create answers once its transaction (tenant lock, task, first state event, RESERVE,
outbox, idempotency record) committed and its workflow was started in Temporal (no worker runs,
so the workflows wait: the benchmark measures the front door, not the pipeline). Then the same
keys again (replays: one read, no write). Prints a line per level and a final JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from collections import Counter
from decimal import Decimal

from bench.common import bench_stack, input_image
from bench.webhook_bench import percentile


def _setup(settings) -> tuple[str, str]:  # noqa: ANN001 - config.Settings
    """Migrations, a tenant with room for every create, one stored input image: (api key, asset id)."""
    from schema import tenants
    from schema.db import Database
    from schema.migrate import upgrade

    upgrade(settings.database_url)
    with Database(settings.database_url).transaction() as session:
        key = tenants.create_tenant(session, "bench", tenants.TenantLimits(
            credits=Decimal(10**9), max_concurrent=1000, rate_per_minute=10**7)).api_key
    return key, input_image(settings, "bench")


async def post_all(url: str, api_key: str, keys: list[str], asset_id: str, concurrency: int) -> dict:
    """POST one create per key, `concurrency` in flight: rate and latency percentiles."""
    import httpx

    latencies: list[float] = []
    statuses: Counter[str] = Counter()
    pending = iter(keys)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    auth = {"Authorization": f"Bearer {api_key}"}
    async with httpx.AsyncClient(timeout=60, limits=limits) as http:
        async def sender() -> None:
            for key in pending:
                body = {"prompt": f"benchmark {key}", "image_asset_id": asset_id, "duration_s": 2}
                t0 = time.perf_counter()
                try:
                    resp = await http.post(url, json=body, headers={**auth, "Idempotency-Key": key})
                    statuses[str(resp.status_code)] += 1
                except httpx.HTTPError as exc:
                    statuses[type(exc).__name__] += 1
                latencies.append((time.perf_counter() - t0) * 1000)

        t0 = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(concurrency)))
        wall = time.perf_counter() - t0
    lat = sorted(latencies)
    return {"concurrency": concurrency, "requests": len(keys), "wall_s": round(wall, 2),
            "per_s": round(len(keys) / wall, 1), "p50_ms": round(percentile(lat, 50), 1),
            "p95_ms": round(percentile(lat, 95), 1), "p99_ms": round(percentile(lat, 99), 1),
            "statuses": dict(statuses)}


async def bench(settings, args: argparse.Namespace) -> dict:  # noqa: ANN001
    api_key, asset_id = await asyncio.to_thread(_setup, settings)
    url = f"{settings.gateway_url}/v1/generations"
    levels, replays = [], []
    await post_all(url, api_key, [f"warm-{i}" for i in range(20)], asset_id, 4)  # connections, first plan/import
    for concurrency in (int(c) for c in args.concurrency.split(",")):
        keys = [f"c{concurrency}-{uuid.uuid4().hex}" for _ in range(args.creates)]
        level = await post_all(url, api_key, keys, asset_id, concurrency)
        print(f"creates  c={concurrency:<3} {level['per_s']:>7.1f}/s  p50 {level['p50_ms']:>7.1f} ms  "
              f"p95 {level['p95_ms']:>7.1f} ms  p99 {level['p99_ms']:>7.1f} ms  {level['statuses']}")
        levels.append(level)
        replay = await post_all(url, api_key, keys, asset_id, concurrency)
        print(f"replays  c={concurrency:<3} {replay['per_s']:>7.1f}/s  p50 {replay['p50_ms']:>7.1f} ms  "
              f"p95 {replay['p95_ms']:>7.1f} ms  p99 {replay['p99_ms']:>7.1f} ms  {replay['statuses']}")
        replays.append(replay)
    return {"creates": levels, "replays": replays}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--creates", type=int, default=500, help="creates per concurrency level")
    parser.add_argument("--concurrency", default="1,8,32", help="comma-separated levels")
    parser.add_argument("--keep", action="store_true", help="leave the stack running")
    args = parser.parse_args()

    with bench_stack("reelqueue-bench-api-", ["postgres", "s3", "temporal", "gateway"], keep=args.keep) as settings:
        print(json.dumps(asyncio.run(bench(settings, args)), sort_keys=True))

if __name__ == "__main__":
    main()
