"""Pipeline benchmark (on demand: `make bench-pipeline ARGS="--tasks 100"`): the pipeline's own
cost per task against the engine's ceiling, in one run on one stack.

Starts the whole embedded stack under a temporary REELQUEUE_HOME (emulator in `fast` render mode,
the worker as its real process), then:

1. **engine**: N `BenchNoopWorkflow`s (bench/noop_workflow.py: 8 no-op activities in a row) on a
   worker in this process built with the real worker's tuning (`worker.worker_tuning`): the rate
   the engine and those settings allow, `engine_wf_per_s`.
2. **pipeline**: N tasks of 1-second clips (distinct products, so each clip is rendered), an
   instant provider (the emulator tuned through `/_sim/faults`: job time 0, limits far above N),
   admission far above N, real fetch and transcode: `pipeline_tasks_per_s` from the first start
   to the last workflow closed.

Prints one JSON object: engine_wf_per_s, pipeline_tasks_per_s, ratio, cpu_s_per_task by process
(worker, temporal, postgres, s3, emulator, gateway, ffmpeg; bench/common.py says how), and the
figures read from the worker's /metrics (submits, status calls, mean seconds per activity).
Nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import time
import uuid
from pathlib import Path

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


def stack_env(tasks: int) -> None:
    """Settings every process of the stack reads (set before `dev up`): fast renders, and limits
    (provider admission, emulator running/queued) that never bind at this size."""
    room = max(1000, 4 * tasks)
    os.environ["REELQUEUE_EMULATOR_RENDER"] = "fast"
    os.environ["REELQUEUE_EMULATOR_MAX_RUNNING"] = str(room)
    os.environ["REELQUEUE_EMULATOR_MAX_QUEUED"] = str(room)
    os.environ["REELQUEUE_PROVIDER_LIMITS"] = json.dumps({"emulator": {"max_concurrent": room}})


async def engine_ceiling(settings, workflows: int) -> dict:  # noqa: ANN001 - config.Settings
    from temporalio.worker import Worker

    from adapters.temporal_client import connect
    from bench.noop_workflow import STEPS, NoopWorkflow, noop
    from worker import worker_tuning

    client = await connect(settings)
    queue = f"bench-engine-{uuid.uuid4().hex[:8]}"
    gate = asyncio.Semaphore(50)

    async def one(i: int) -> int:
        async with gate:
            handle = await client.start_workflow(NoopWorkflow.run, STEPS, id=f"bench-noop-{queue}-{i}",
                                                 task_queue=queue)
        return await handle.result()

    async with Worker(client, task_queue=queue, workflows=[NoopWorkflow], activities=[noop], **worker_tuning(settings)):
        t0 = time.perf_counter()
        done = await asyncio.gather(*(one(i) for i in range(workflows)))
        took = time.perf_counter() - t0
    assert all(d == STEPS for d in done), "a no-op workflow did not run every step"
    return {"workflows": workflows, "seconds": round(took, 2), "wf_per_s": round(workflows / took, 2),
            "activities_per_s": round(workflows * STEPS / took, 1)}


def import_tasks(settings, home: Path, tasks: int) -> str:  # noqa: ANN001
    from catalog.plan import load_plan
    from catalog.service import run_import

    (home / "images").mkdir(exist_ok=True)
    shutil.copy(EXAMPLES / "images" / "aurora-lamp.png", home / "images" / "lamp.png")
    lines = ["product_id,title,description,image_url,price,currency,category"]
    lines += [f"P-{i:06d},Pipeline item {i},Generated product {i},images/lamp.png,19.99,USD,Home" for i in range(tasks)]
    (home / "catalog.csv").write_text("\n".join(lines) + "\n")
    (home / "plan.toml").write_text(one_second_plan("bench-pipeline"))
    return run_import(settings, home / "catalog.csv", load_plan(home / "plan.toml"), catalog="bench-pipeline").import_id


async def pipeline(settings, import_id: str) -> dict:  # noqa: ANN001
    from adapters.temporal_client import connect
    from cli.starting import start_workflows
    from schema import queries
    from schema.db import Database

    db = Database(settings.database_url)
    with db.transaction() as session:
        tasks = queries.list_tasks(session, import_id)
    client = await connect(settings)
    t0 = time.perf_counter()
    await start_workflows(client, tasks, import_id, settings.task_queue)
    await asyncio.gather(*(client.get_workflow_handle(t.workflow_id).result() for t in tasks), return_exceptions=True)
    took = time.perf_counter() - t0
    with db.transaction() as session:
        by_status = queries.status_counts(session, import_id)
    return {"tasks": len(tasks), "seconds": round(took, 2), "tasks_per_s": round(len(tasks) / took, 3),
            "by_status": by_status}


def per_unit(cpu: dict[str, float], units: int, only: tuple[str, ...] | None = None) -> dict[str, float]:
    """CPU seconds per workflow or task, by process (`only`: just these processes)."""
    return {k: round(v / units, 4) for k, v in sorted(cpu.items()) if only is None or k in only}


def worker_profile(before: dict, after: dict, tasks: int) -> dict:
    """Per task from the worker's /metrics: submits, status calls, seconds in each activity."""
    def moved(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    activities = sorted({dict(lab)["activity"] for n, lab in after if n == "reelqueue_activity_seconds_count"})
    mean_s = {}
    for name in activities:
        count = moved("reelqueue_activity_seconds_count", activity=name)
        if count:
            mean_s[name] = {"per_task": round(count / tasks, 2),
                            "mean_s": round(moved("reelqueue_activity_seconds_sum", activity=name) / count, 4)}
    return {"submits_per_task": round(moved("reelqueue_submits_total") / tasks, 2),
            "status_calls_per_task": round(moved("reelqueue_status_calls_total") / tasks, 2),
            "transitions_per_task": round(moved("reelqueue_transitions_total") / tasks, 2),
            "activities": mean_s}


def run(args: argparse.Namespace) -> dict:
    import httpx

    import devstack
    from config.settings import Settings

    home = fresh_home("reelqueue-bench-pipeline-")
    stack_env(args.tasks)
    devstack.up(Settings(), services=SERVICES)
    settings = devstack.effective_settings(Settings())
    try:
        httpx.post(f"{settings.emulator_url}/_sim/faults", json={"job_seconds": 0, "job_jitter": 0}, timeout=10)
        pids = service_pids(settings)
        cpu_before = cpu_by_process(pids)
        engine = asyncio.run(engine_ceiling(settings, args.engine_workflows or args.tasks))
        engine["cpu_s_per_wf"] = per_unit(cpu_delta(cpu_before, cpu_by_process(pids)), engine["workflows"],
                                          only=("bench", "temporal", "postgres"))
        import_id = import_tasks(settings, home, args.tasks)
        metrics_before, cpu_before = scrape(worker_metrics_url(settings)), cpu_by_process(pids)
        result = asyncio.run(pipeline(settings, import_id))
        cpu = cpu_delta(cpu_before, cpu_by_process(pids))
        profile = worker_profile(metrics_before, scrape(worker_metrics_url(settings)), args.tasks)
        emulator = httpx.get(f"{settings.emulator_url}/_sim/stats", timeout=10).json()
    finally:
        if not args.keep:
            devstack.down(settings)
            shutil.rmtree(home, ignore_errors=True)
    return {
        "engine_wf_per_s": engine["wf_per_s"],
        "pipeline_tasks_per_s": result["tasks_per_s"],
        "ratio": round(result["tasks_per_s"] / engine["wf_per_s"], 3),
        "cpu_s_per_task": per_unit(cpu, args.tasks),
        "cpu_s_per_task_total": round(sum(v for k, v in cpu.items() if k != "bench") / args.tasks, 4),
        "engine": engine,
        "pipeline": result,
        "worker_metrics": profile,
        "emulator": {k: emulator[k] for k in ("submits", "refused_429", "max_running", "renders", "render_cache_hits",
                                              "status_calls_per_job", "webhooks_sent")},
        "worker_settings": {k: getattr(settings, k) for k in ("worker_max_activities", "worker_max_local_activities",
                                                               "worker_max_workflow_tasks")},
        "machine": machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=100, help="pipeline tasks (and engine workflows unless given)")
    parser.add_argument("--engine-workflows", type=int, default=0, help="no-op workflows for the ceiling (0: --tasks)")
    parser.add_argument("--keep", action="store_true", help="leave the stack running")
    print(json.dumps(run(parser.parse_args()), indent=2))


if __name__ == "__main__":
    main()
