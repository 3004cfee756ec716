"""Import benchmark (run on demand: `make bench`): a generated plain CSV, imported and expanded.

Starts its own Postgres and S3 under a temporary REELQUEUE_HOME, generates N rows (default
100,000) streamed to disk, imports them with a plan of 8 combinations and URL checks off, and
prints rows/s, tasks/s and peak memory. Nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import time
from pathlib import Path

PLAN = """
name = "bench"
locales = ["en-US", "de-DE"]
aspect_ratios = ["9:16", "16:9"]

[[variants]]
id = "a"
hook = { "en-US" = "Now on sale", "de-DE" = "Jetzt im Angebot" }

[[templates]]
id = "showcase"
version = "showcase-v1"
duration_s = 3
cost_estimate = 4
[templates.prompts]
"en-US" = "Slow push-in on {title}. Price {price}. {hook}."
"de-DE" = "Kamerafahrt auf {title}. Preis {price}. {hook}."

[[templates]]
id = "teaser"
version = "teaser-v1"
duration_s = 2
cost_estimate = 3
[templates.prompts]
"en-US" = "Close-up of {title}. {hook}!"
"de-DE" = "Nahaufnahme von {title}. {hook}!"
"""


def write_catalog(path: Path, rows: int) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write("product_id,title,description,image_url,price,currency,category\n")
        for i in range(rows):
            f.write(f"SKU-{i:07d},Product {i},Generated product number {i},"
                    f"https://cdn.example.com/p/{i}.jpg,{(i % 9000) / 100 + 1:.2f},USD,Category {i % 40}\n")


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--keep", action="store_true", help="leave the stack running")
    args = parser.parse_args()

    from bench.common import database_and_storage, fresh_home

    home = fresh_home("reelqueue-bench-")
    import devstack
    from bench.common import cpu_by_process, cpu_delta, machine, service_pids
    from catalog.plan import load_plan
    from catalog.readers import read_catalog
    from catalog.service import run_import

    settings = database_and_storage()
    try:
        catalog, plan_path = home / "catalog.csv", home / "plan.toml"
        t0 = time.perf_counter()
        write_catalog(catalog, args.rows)
        plan_path.write_text(PLAN)
        plan = load_plan(plan_path)
        print(f"generated {args.rows:,} rows ({catalog.stat().st_size / 2**20:.1f} MiB) "
              f"in {time.perf_counter() - t0:.1f} s")
        rss_before = peak_rss_mib()

        t0 = time.perf_counter()
        read = read_catalog(catalog)
        products = sum(1 for _ in read.products)
        read_s = time.perf_counter() - t0
        print(f"read only:    {products:,} products in {read_s:.2f} s = {products / read_s:,.0f} rows/s")

        pids = service_pids(settings)
        t0, cpu_before = time.perf_counter(), cpu_by_process(pids)
        summary = run_import(settings, catalog, plan, catalog="bench", check_urls=False)
        took = time.perf_counter() - t0
        cpu = cpu_delta(cpu_before, cpu_by_process(pids))
        print(f"import:       {summary.rows:,} rows, {summary.products:,} products, {summary.tasks:,} tasks "
              f"({summary.tasks_new:,} new) in {took:.1f} s")
        print(f"              {summary.rows / took:,.0f} rows/s, {summary.tasks / took:,.0f} tasks/s")
        print(f"CPU:          this process {cpu['bench']:.1f} s, postgres {cpu['postgres']:.1f} s, "
              f"s3 {cpu['s3']:.1f} s (load average {machine()['load_avg_1m']})")
        print(f"peak RSS:     {peak_rss_mib():,.0f} MiB (before import {rss_before:,.0f} MiB)")

        t0 = time.perf_counter()
        again = run_import(settings, catalog, plan, catalog="bench", check_urls=False)
        print(f"re-import:    same import {again.import_id == summary.import_id}, "
              f"{again.tasks_new} new tasks, {time.perf_counter() - t0:.2f} s")
    finally:
        if not args.keep:
            devstack.down(settings)
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
