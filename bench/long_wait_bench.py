"""Tasks waiting hours in a provider's line, on the time-skipping server: how their histories grow.

`python -m bench.long_wait_bench --tasks 1000 --hours 6`: one job holds the provider's only slot for longer
than the run; `--tasks` tasks with a fallback route (healthy) wait behind it. Prints each history's growth
an hour over the first hour and over the hours after (long-wait-spacing-v1), the longest history, the looks
at the routes per task-hour, and the wall time. The workflow code and the gate are the real ones; the
activities are the time-skipping tests' fakes (tests/workflow/fleet_fakes.py), so what is measured is the
workflow's own history, not Postgres (bench/route_look_bench.py measures what a look costs there).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "workflow"))

from fleet_fakes import PROVIDER, Fleet, running_fleet  # noqa: E402
from histories import history_lengths  # noqa: E402
from server_clock import skip, skip_hours, time_skipping_server  # noqa: E402

from contracts.routing import Route  # noqa: E402

START_BATCH = 50  # workflows started at once (the test server takes a burst of starts better in batches)


async def run(tasks: int, hours: float, step_s: float) -> None:
    began = time.perf_counter()
    async with time_skipping_server() as env:
        fleet = Fleet(limit=1, job_s=(hours + 2) * 3600.0, deadline_s=(hours + 3) * 3600.0, snapshot_reuse_s=5.0,
                      routes=[Route(provider=PROVIDER, model="m"), Route(provider="alt", model="m2")])
        async with running_fleet(env, fleet) as fleet_run:
            await fleet_run.start("first")
            while not fleet.jobs:
                await env.sleep(1)
            handles = []
            for i in range(0, tasks, START_BATCH):
                handles += await asyncio.gather(*(fleet_run.start(f"w{j:05d}")
                                                  for j in range(i, min(tasks, i + START_BATCH))))
                await skip(env, 2)
            await skip(env, 300)
            print(f"{len(handles)} tasks waiting after {time.perf_counter() - began:.0f} s", flush=True)
            start = await history_lengths(handles)
            await skip_hours(env, 1.0, step_s=step_s)
            middle = await history_lengths(handles)
            print(f"first hour done after {time.perf_counter() - began:.0f} s", flush=True)
            await skip_hours(env, hours - 1.0, step_s=step_s)
            end = await history_lengths(handles)
        first = [b - a for a, b in zip(start, middle, strict=True)]
        after = [(b - a) / (hours - 1.0) for a, b in zip(middle, end, strict=True)]
        looks = sum(1 for _, _, take in fleet.routed if not take)
        print(f"{tasks} tasks x {hours:g} h in line: events in the first hour median {statistics.median(first):.0f} "
              f"max {max(first)}; an hour after it median {statistics.median(after):.1f} max {max(after):.1f}; "
              f"longest history {max(end)} events; looks {looks / tasks / hours:.1f} per task-hour; "
              f"jobs made while waiting {len(fleet.jobs) - 1}; wall {time.perf_counter() - began:.0f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--hours", type=float, default=6.0, help="simulated hours in line (at least 2)")
    parser.add_argument("--step-s", type=float, default=120.0, help="server time skipped per call")
    args = parser.parse_args()
    asyncio.run(run(args.tasks, max(args.hours, 2.0), args.step_s))


if __name__ == "__main__":
    main()
