"""`reelqueue run` benchmarks (on demand: `make bench-run ARGS="start --tasks 8000"`).

Each mode starts its own embedded stack under a temporary REELQUEUE_HOME and prints figures;
nothing here is a pass/fail test.

- `start --tasks N`: import N tasks (a plan of 8 combinations, URL checks off), then time the real
  `reelqueue run IMPORT --json` in a child process against a task queue no worker polls, so only
  starting is measured: starts per second over the run (sampled from Temporal every few seconds,
  to show whether the rate holds steady) and the child's peak RSS.
- `complete --tasks N`: the full stack with the emulator's defaults, a plan of one 1-second
  template, and `reelqueue run IMPORT --wait --json`: wall time, tasks/s, the emulator's 429s and
  its maximum of running jobs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import one_second_plan
from bench.import_bench import PLAN as EIGHT_COMBINATIONS
from bench.import_bench import write_catalog

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
# The child reports its own peak RSS on the way out (ru_maxrss of a waited child would mix in
# every other process this benchmark ever waited for).
CLI_WITH_PEAK_RSS = (
    "import atexit, resource, sys\n"
    "atexit.register(lambda: print('PEAK_RSS_KIB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,"
    " file=sys.stderr))\n"
    "from starter import app\n"
    "sys.argv = ['reelqueue', *sys.argv[1:]]\n"
    "app()\n"
)


def run_cli(*args: str, env: dict[str, str]) -> tuple[dict, float, float]:
    """The real CLI in a child process: (its --json output, wall seconds, peak RSS MiB)."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CLI_WITH_PEAK_RSS, *args], env=env, capture_output=True,
                          text=True, cwd=Path(__file__).resolve().parents[1])
    wall = time.perf_counter() - started
    peak = next((int(line.split()[1]) / 1024 for line in done.stderr.splitlines() if line.startswith("PEAK_RSS_KIB")),
                float("nan"))
    try:
        out = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"reelqueue {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}") from None
    return out, wall, peak


async def sample_started(settings, import_id: str, every_s: float, stop: asyncio.Event) -> list[tuple[float, int]]:
    """(seconds, workflows of the import) every few seconds while the start runs."""
    from adapters.temporal_client import connect

    client = await connect(settings)
    samples, t0 = [], time.perf_counter()
    while not stop.is_set():
        count = await client.count_workflows(f'ImportId = "{import_id}"')
        samples.append((time.perf_counter() - t0, count.count))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s)
    return samples


def bench_start(settings, home: Path, tasks: int, env: dict[str, str]) -> None:
    from catalog.plan import load_plan
    from catalog.service import run_import

    rows = -(-tasks // 8)
    catalog, plan_path = home / "catalog.csv", home / "plan.toml"
    write_catalog(catalog, rows)
    plan_path.write_text(EIGHT_COMBINATIONS)
    t0 = time.perf_counter()
    summary = run_import(settings, catalog, load_plan(plan_path), catalog="bench", check_urls=False)
    print(f"import:      {summary.tasks:,} tasks in {time.perf_counter() - t0:.1f} s")
    env = {**env, "REELQUEUE_TASK_QUEUE": "bench-start-no-worker"}  # nothing runs them: only starting counts

    async def measure() -> tuple[dict, float, float, list[tuple[float, int]]]:
        stop = asyncio.Event()
        sampler = asyncio.create_task(sample_started(settings, summary.import_id, 5.0, stop))
        out, wall, peak = await asyncio.to_thread(run_cli, "run", summary.import_id, "--json", env=env)
        stop.set()
        return out, wall, peak, await sampler

    out, wall, peak, samples = asyncio.run(measure())
    rates = [(n1 - n0) / (t1 - t0) for (t0, n0), (t1, n1) in zip(samples, samples[1:], strict=False) if n1 > n0]
    print(f"run:         {out['started']:,} workflows started in {wall:.1f} s = {out['started'] / wall:,.0f} starts/s")
    if rates:
        print(f"             per 5 s: min {min(rates):,.0f}, median {sorted(rates)[len(rates) // 2]:,.0f}, "
              f"max {max(rates):,.0f} starts/s ({len(rates)} samples)")
    print(f"peak RSS:    {peak:,.0f} MiB (the `reelqueue run` process)")


def bench_complete(settings, home: Path, tasks: int, env: dict[str, str]) -> None:
    import httpx

    from catalog.plan import load_plan
    from catalog.service import run_import

    (home / "images").mkdir(exist_ok=True)
    shutil.copy(EXAMPLES / "images" / "aurora-lamp.png", home / "images" / "lamp.png")
    lines = ["product_id,title,description,image_url,price,currency,category"]
    lines += [f"B-{i:05d},Bench item {i},Generated product {i},images/lamp.png,19.99,USD,Home" for i in range(tasks)]
    catalog, plan_path = home / "catalog.csv", home / "plan.toml"
    catalog.write_text("\n".join(lines) + "\n")
    plan_path.write_text(one_second_plan("bench-complete"))
    summary = run_import(settings, catalog, load_plan(plan_path), catalog="bench")
    httpx.delete(f"{settings.emulator_url}/_sim/stats", timeout=10)
    out, wall, _ = run_cli("run", summary.import_id, "--wait", "--timeout", "3600", "--json", env=env)
    stats = httpx.get(f"{settings.emulator_url}/_sim/stats", timeout=10).json()
    print(f"run --wait:  {out['tasks']} tasks in {wall:.0f} s = {out['tasks'] / wall:.2f} tasks/s; {out['by_status']}")
    print(f"emulator:    {stats['refused_429']} answers 429, max running {stats['max_running']}, "
          f"max alive {stats['max_alive']}, {stats['submits']} submits, "
          f"{stats['status_calls_per_job']:.1f} status calls per job")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["start", "complete"])
    parser.add_argument("--tasks", type=int, default=8_000)
    parser.add_argument("--keep", action="store_true", help="leave the stack running")
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="reelqueue-bench-"))
    os.environ["REELQUEUE_HOME"] = str(home)
    import devstack
    from config.settings import Settings

    services = ["postgres", "s3", "temporal"] + (["emulator", "gateway", "worker"] if args.mode == "complete" else [])
    devstack.up(Settings(), services=services)
    settings = Settings()
    env = {**os.environ, "REELQUEUE_HOME": str(home)}
    try:
        if args.mode == "start":
            bench_start(settings, home, args.tasks, env)
        else:
            bench_complete(settings, home, args.tasks, env)
    finally:
        if not args.keep:
            devstack.down(settings)
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
