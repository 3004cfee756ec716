"""Pipeline benchmark (on demand: `make bench-pipeline ARGS="--tasks 100"`): the pipeline's own
cost per task against the engine's ceiling, in one run on one stack.

Starts the whole embedded stack under a temporary REELQUEUE_HOME (emulator in `fast` render mode,
the workers as real `python worker.py` processes), then:

1. **engine**, three times (before the pipeline, between the pipeline and the count of its billable
   actions, and after): `--engine-workflows` (at least 200) `BenchNoopWorkflow`s (bench/noop_workflow.py:
   8 no-op activities in a row) on a worker in this process built with the real worker's tuning
   (`worker.worker_tuning`): the CPU per no-op step, taken as the median of the three runs (one
   short run moved by half from one run to the next), and the rate, `engine_wf_per_s`.
2. **pipeline**: N tasks of 1-second clips (distinct products, so each clip is rendered), an
   instant provider (the emulator tuned through `/_sim/faults`: job time 0, limits far above N),
   admission far above N, real fetch and transcode: `pipeline_tasks_per_s` from the first start
   to the last workflow closed.

Prints one JSON object (and a summary of the judged figures on stderr): `orchestration_cpu_s_per_task`
(the judge: Temporal, worker, gateway, Postgres), `billable_actions_per_task` (Temporal Cloud's rules,
bench/billing.py: every workflow's history but the engine's, and the queries and heartbeats the
server counted), `history_events_per_task`, `orchestration_ratio` (orchestration CPU per task over
the engine's median CPU per step x 9) with the three engine runs and their spread, cpu_s_per_task by
process (worker, temporal, postgres, s3, emulator, gateway, ffmpeg; bench/common.py says how), what
the Temporal server did per task (frontend requests by operation, persistence calls by service, its
own `action` counter: `server_per_task`), the load average around each phase, and the figures read
from the worker's /metrics (submits, status calls, mean seconds per activity).

`--layouts 1,2,3` instead runs the pipeline once per worker layout on the same stack, N new tasks
each (titles of their own, so every clip is rendered): 1 = one process serving both task queues,
2 = an io process and a media process, 3 = an io process and two media processes (LAYOUTS). Per
layout: tasks/s, CPU per task by process, and queue latency (schedule-to-start of first attempts,
from the workflows' histories) on the io and media queues and of workflow tasks.
Nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from bench.common import (
    EXAMPLES,
    SERVICES,
    by_label,
    cpu_by_process,
    cpu_delta,
    fresh_home,
    machine,
    one_second_plan,
    scrape,
    scrape_all,
    service_pids,
    temporal_metrics_url,
    total,
)

# The queues each worker process of a layout serves (`python worker.py --queues ...`).
LAYOUTS = {"1": ("io,media",), "2": ("io", "media"), "3": ("io", "media", "media")}
ORCHESTRATION = ("temporal", "worker", "gateway", "postgres")  # the processes orchestration CPU counts
STEPS_PER_TASK = 9  # the card's eight named steps and the slot request: what the engine's cost per step is scaled by
ENGINE_RUNS = ("before", "between", "after")  # when the no-op runs go: around the pipeline and its history reads
SERVER_METRICS_FLUSH_S = 2.5  # the dev server publishes its counters on /metrics about once a second
ENGINE_MIN_WORKFLOWS = 200  # fewer gave an engine cost per step that moved by half between runs
# The dev server's persistence calls worth following per task (what the server does for each request).
PERSISTENCE = ("GetNamespace", "GetCurrentClusterMetadata", "GetCurrentExecution", "UpdateWorkflowExecution",
               "CreateWorkflowExecution", "CreateTasks")
STACK = [name for name in SERVICES if name != "worker"]  # the benchmark starts its own worker processes


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
    return {"workflows": workflows, "steps": STEPS, "seconds": round(took, 2), "wf_per_s": round(workflows / took, 2),
            "activities_per_s": round(workflows * STEPS / took, 1)}


def engine_run(settings, pids: dict, workflows: int, when: str) -> dict:  # noqa: ANN001
    """One no-op run with the CPU it cost (Temporal, Postgres and this process's client and worker)
    per workflow and per step, and the machine's load before and after."""
    load_before = round(os.getloadavg()[0], 2)
    cpu_before = cpu_by_process(pids)
    engine = asyncio.run(engine_ceiling(settings, workflows))
    cpu = per_unit(cpu_delta(cpu_before, cpu_by_process(pids)), workflows, only=("bench", "temporal", "postgres"))
    return engine | {"when": when, "cpu_s_per_wf": cpu,
                     "cpu_s_per_step": round(sum(cpu.values()) / engine["steps"], 5),
                     "load_avg_1m": [load_before, round(os.getloadavg()[0], 2)]}


def engine_summary(runs: list[dict]) -> dict:
    """The engine's cost per step as the median of the runs, and how far apart the runs were."""
    per_step = sorted(r["cpu_s_per_step"] for r in runs)
    median = statistics.median(per_step)
    return {"cpu_s_per_step_median": round(median, 5), "cpu_s_per_step_runs": [r["cpu_s_per_step"] for r in runs],
            "spread": round(per_step[-1] - per_step[0], 5),
            "spread_of_median": round((per_step[-1] - per_step[0]) / median, 3) if median else None,
            "comparable": all(r["workflows"] >= ENGINE_MIN_WORKFLOWS for r in runs),
            "wf_per_s_runs": [r["wf_per_s"] for r in runs]}


def import_tasks(settings, home: Path, tasks: int, name: str = "bench-pipeline") -> str:  # noqa: ANN001
    """N tasks of a catalog of its own, titled after it (the emulator renders each clip anew)."""
    from catalog.plan import load_plan
    from catalog.service import run_import

    folder = home / name
    (folder / "images").mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLES / "images" / "aurora-lamp.png", folder / "images" / "lamp.png")
    lines = ["product_id,title,description,image_url,price,currency,category"]
    lines += [f"P-{i:06d},{name} item {i},Generated product {i},images/lamp.png,19.99,USD,Home" for i in range(tasks)]
    (folder / "catalog.csv").write_text("\n".join(lines) + "\n")
    (folder / "plan.toml").write_text(one_second_plan(name))
    return run_import(settings, folder / "catalog.csv", load_plan(folder / "plan.toml"), catalog=name).import_id


@contextlib.contextmanager
def worker_processes(settings, folder: Path, layout: str) -> Iterator[list[tuple[int, str, str]]]:  # noqa: ANN001
    """The layout's worker processes on the stack's queue, each with a /metrics port of its own:
    (pid, metrics URL, queues served) each. Stopped afterwards (SIGTERM: they drain)."""
    from devstack.drill import start_worker, stop_worker, wait_worker_ready
    from devstack.ports import pick_ports

    queues = LAYOUTS[layout]
    started = []
    try:
        for n, (serves, port) in enumerate(zip(queues, pick_ports(len(queues)), strict=True)):
            role = f"worker-{n}-{serves.replace(',', '+')}"
            proc = start_worker(settings, folder, role, settings.task_queue,
                                {"REELQUEUE_WORKER_METRICS_PORT": str(port)}, serves)
            started.append((proc, role, f"http://{settings.worker_metrics_host}:{port}/metrics", serves))
        for proc, role, _, _ in started:
            asyncio.run(wait_worker_ready(proc, folder, role))
        yield [(proc.pid, url, serves) for proc, _, url, serves in started]
    finally:
        for proc, *_ in started:
            stop_worker(proc)


async def queue_latency(settings, import_id: str) -> dict:  # noqa: ANN001
    """Schedule-to-start (seconds) of first attempts on the io and media queues, and of workflow tasks,
    from each task's workflow history: p50, p95, max and how many; and the histories' mean length."""
    from adapters.temporal_client import connect
    from contracts import workflow_api as api
    from schema import queries
    from schema.db import Database

    with Database(settings.database_url).transaction() as session:
        ids = [t.workflow_id for t in queries.list_tasks(session, import_id)]
    client = await connect(settings)
    media = api.media_queue(settings.task_queue)
    waits: dict[str, list[float]] = {"io": [], "media": [], "workflow_task": []}
    events: list[int] = []
    steps: list[int] = []  # activity tasks scheduled (local activities are markers, not counted)
    gate = asyncio.Semaphore(16)

    async def one(workflow_id: str) -> None:
        async with gate:
            history = await client.get_workflow_handle(workflow_id).fetch_history()
        events.append(len(history.events))
        steps.append(sum(e.HasField("activity_task_scheduled_event_attributes") for e in history.events))
        scheduled = {}
        for e in history.events:
            at = e.event_time.ToDatetime()
            if e.HasField("activity_task_scheduled_event_attributes"):
                queue = e.activity_task_scheduled_event_attributes.task_queue.name
                scheduled[e.event_id] = (at, "media" if queue == media else "io")
            elif e.HasField("workflow_task_scheduled_event_attributes"):
                scheduled[e.event_id] = (at, "workflow_task")
            elif e.HasField("activity_task_started_event_attributes"):
                started = e.activity_task_started_event_attributes
                if started.attempt == 1:  # later attempts wait out their retry backoff first
                    since, kind = scheduled[started.scheduled_event_id]
                    waits[kind].append((at - since).total_seconds())
            elif e.HasField("workflow_task_started_event_attributes"):
                since, kind = scheduled[e.workflow_task_started_event_attributes.scheduled_event_id]
                waits[kind].append((at - since).total_seconds())

    await asyncio.gather(*(one(i) for i in ids))
    return {kind: _spread(values) for kind, values in waits.items()} | {
        "history_events_per_workflow": round(sum(events) / max(1, len(events)), 1),
        "activities_per_workflow": round(sum(steps) / max(1, len(steps)), 2)}


async def billable_actions(settings, tasks: int, requests: dict[str, float]) -> dict:  # noqa: ANN001
    """Temporal Cloud's billable actions per task (bench/billing.py): every workflow of the stack's
    namespace but the engine's no-op ones (the tasks, the provider gates and anything else the pipeline
    started), read from its history, plus the queries and heartbeats the server counted during the
    pipeline (`requests`: frontend requests by operation)."""
    from adapters.temporal_client import connect
    from bench.billing import history_actions, outside_actions

    client = await connect(settings)
    runs = [w async for w in client.list_workflows() if w.workflow_type != "BenchNoopWorkflow"]
    gate = asyncio.Semaphore(16)
    by_type: dict[str, Counter] = {}

    async def one(w) -> None:  # noqa: ANN001 - WorkflowExecution
        async with gate:
            history = await client.get_workflow_handle(w.id, run_id=w.run_id).fetch_history()
        by_type.setdefault(w.workflow_type, Counter()).update(history_actions(history.events))

    await asyncio.gather(*(one(w) for w in runs))
    every = sum(by_type.values(), Counter()) + outside_actions(requests)
    return {"billable_actions_per_task": round(sum(every.values()) / tasks, 2),
            "billable_actions_by_kind_per_task": {k: round(v / tasks, 2) for k, v in sorted(every.items())},
            "billable_actions_by_workflow_type_per_task": {k: round(sum(v.values()) / tasks, 2)
                                                           for k, v in sorted(by_type.items())},
            "workflows_counted": {t: sum(1 for w in runs if w.workflow_type == t) for t in sorted(by_type)}}


def server_counts(before: dict, after: dict, tasks: int, namespace: str) -> dict:
    """What the Temporal server did per task over the pipeline, from its own /metrics: frontend
    requests by operation, the persistence calls in PERSISTENCE by calling service, and the
    server's own `action` counter by type."""
    def moved(name: str, label: str, **labels: str) -> dict[str, float]:
        was = by_label(before, name, label, **labels)
        return {k: v - was.get(k, 0.0) for k, v in by_label(after, name, label, **labels).items()
                if v - was.get(k, 0.0)}

    requests = moved("service_requests", "operation", service_name="frontend", namespace=namespace)
    persistence = {op: {svc: round(n / tasks, 2) for svc, n in moved("persistence_requests", "service_name",
                                                                     operation=op).items()}
                   for op in PERSISTENCE}
    return {"requests": requests,
            "frontend_requests_per_task": {k: round(v / tasks, 2) for k, v in sorted(requests.items())},
            "persistence_per_task_by_service": persistence,
            "server_action_metric_per_task": {k: round(v / tasks, 2) for k, v in
                                              sorted(moved("action", "action_type", namespace=namespace).items())}}


def _spread(values: list[float]) -> dict:
    ordered = sorted(values) or [float("nan")]
    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))], 3)
    return {"p50": at(0.5), "p95": at(0.95), "max": round(ordered[-1], 3), "n": len(values)}


async def pipeline(settings, import_id: str) -> dict:  # noqa: ANN001
    from adapters.temporal_client import connect
    from control.starting import start_workflows
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


def run_layout(settings, home: Path, layout: str, tasks: int, import_id: str | None = None) -> dict:  # noqa: ANN001
    """The pipeline on one worker layout: N new tasks (or the given import) from first start to last close."""
    import_id = import_id or import_tasks(settings, home, tasks, f"bench-layout-{layout}")
    with worker_processes(settings, home / f"layout-{layout}", layout) as workers:
        urls = [url for _, url, _ in workers]
        pids = service_pids(settings) | {"worker": [pid for pid, _, _ in workers]}
        server_url = temporal_metrics_url(settings)
        server_before = scrape(server_url)
        metrics_before, cpu_before = scrape_all(urls), cpu_by_process(pids)
        each_before = [cpu_by_process({"worker": pid}) for pid, _, _ in workers]
        load_before = round(os.getloadavg()[0], 2)
        result = asyncio.run(pipeline(settings, import_id))
        cpu = cpu_delta(cpu_before, cpu_by_process(pids))
        load_after = round(os.getloadavg()[0], 2)
        time.sleep(SERVER_METRICS_FLUSH_S)
        server = server_counts(server_before, scrape(server_url), tasks, settings.temporal_namespace)
        each = [{"queues": serves} | per_unit(cpu_delta(before, cpu_by_process({"worker": pid})), tasks,
                                              only=("worker", "ffmpeg"))
                for (pid, _, serves), before in zip(workers, each_before, strict=True)]
        profile = worker_profile(metrics_before, scrape_all(urls), tasks)
    return {
        "layout": layout, "processes": list(LAYOUTS[layout]),
        "tasks_per_s": result["tasks_per_s"],
        "cpu_s_per_task": per_unit(cpu, tasks),
        "cpu_s_per_task_total": round(sum(v for k, v in cpu.items() if k != "bench") / tasks, 4),
        "cpu_s_per_task_by_worker_process": each,
        "queue_latency_s": asyncio.run(queue_latency(settings, import_id)),
        "pipeline": result, "worker_metrics": profile, "load_avg_1m": [load_before, load_after],
        "server": server,
    }


def run(args: argparse.Namespace) -> dict:
    import httpx

    import devstack
    from config.settings import Settings

    home = fresh_home("reelqueue-bench-pipeline-")
    stack_env(args.tasks)
    devstack.up(Settings(), services=STACK)
    settings = devstack.effective_settings(Settings())
    try:
        httpx.post(f"{settings.emulator_url}/_sim/faults", json={"job_seconds": 0, "job_jitter": 0}, timeout=10)
        if args.layouts:
            layouts = [run_layout(settings, home, layout, args.tasks) for layout in args.layouts.split(",")]
            return {"tasks": args.tasks, "layouts": layouts, "media_threads": settings.media_threads,
                    "worker_settings": _worker_settings(settings), "machine": machine()}
        pids = service_pids(settings)
        import_id = import_tasks(settings, home, args.tasks)
        engines = [engine_run(settings, pids, args.engine_workflows, ENGINE_RUNS[0])]
        one = run_layout(settings, home, "1", args.tasks, import_id=import_id)
        engines.append(engine_run(settings, pids, args.engine_workflows, ENGINE_RUNS[1]))
        actions = asyncio.run(billable_actions(settings, args.tasks, one["server"].pop("requests")))
        engines.append(engine_run(settings, pids, args.engine_workflows, ENGINE_RUNS[2]))
        emulator = httpx.get(f"{settings.emulator_url}/_sim/stats", timeout=10).json()
    finally:
        if not args.keep:
            devstack.down(settings)
            shutil.rmtree(home, ignore_errors=True)
    engine = engine_summary(engines)
    engine_wf_per_s = statistics.median(r["wf_per_s"] for r in engines)
    return orchestration_cost(engine, one) | actions | {
        "engine_wf_per_s": engine_wf_per_s,
        "pipeline_tasks_per_s": one["tasks_per_s"],
        "ratio": round(one["tasks_per_s"] / engine_wf_per_s, 3),
        "cpu_s_per_task": one["cpu_s_per_task"],
        "cpu_s_per_task_total": one["cpu_s_per_task_total"],
        "load_avg_1m_pipeline": one["load_avg_1m"],
        "engine": engine | {"runs": engines},
        "server_per_task": one["server"],
        "pipeline": one["pipeline"],
        "queue_latency_s": one["queue_latency_s"],
        "worker_metrics": one["worker_metrics"],
        "emulator": {k: emulator[k] for k in ("submits", "refused_429", "max_running", "renders", "render_cache_hits",
                                              "status_calls_per_job", "webhooks_sent")},
        "worker_settings": _worker_settings(settings),
        "machine": machine(),
    }


def orchestration_cost(engine: dict, one: dict) -> dict:
    """The pipeline's orchestration cost against the engine's own: orchestration CPU per task (Temporal,
    worker, gateway, Postgres: not ffmpeg, the emulator or S3), the judge, since CPU-seconds count work
    whatever the run's pace; and beside it `orchestration_ratio`, that over the engine's CPU per no-op
    step (the median of the runs) times STEPS_PER_TASK, a fixed count, so a step moved into a local
    activity makes the ratio smaller, as it makes the task cheaper. `activities_per_task` (activity
    tasks in a task's history) and the history's length per task beside them."""
    per_step = engine["cpu_s_per_step_median"]
    orchestration = sum(one["cpu_s_per_task"].get(k, 0.0) for k in ORCHESTRATION)
    return {"orchestration_cpu_s_per_task": round(orchestration, 4), "engine_cpu_s_per_step": round(per_step, 5),
            "engine_cpu_s_per_step_runs": engine["cpu_s_per_step_runs"], "engine_spread": engine["spread"],
            "orchestration_ratio_comparable": engine["comparable"],
            "orchestration_ratio": round(orchestration / (per_step * STEPS_PER_TASK), 2),
            "activities_per_task": one["queue_latency_s"]["activities_per_workflow"],
            "history_events_per_task": one["queue_latency_s"]["history_events_per_workflow"]}


def _worker_settings(settings) -> dict:  # noqa: ANN001
    from worker import media_slots

    return {k: getattr(settings, k) for k in ("worker_max_activities", "worker_max_local_activities",
                                              "worker_max_workflow_tasks")} | {"media_slots": media_slots(settings)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=100, help="pipeline tasks (and engine workflows unless given)")
    parser.add_argument("--engine-workflows", type=int, default=ENGINE_MIN_WORKFLOWS,
                        help=f"no-op workflows in each of the engine's three runs (fewer than {ENGINE_MIN_WORKFLOWS}: "
                             "a smoke run, its ratio marked as not comparable)")
    parser.add_argument("--layouts", default="", help="e.g. 1,2,3: the pipeline per worker layout (LAYOUTS), no engine")
    parser.add_argument("--keep", action="store_true", help="leave the stack running")
    report = run(parser.parse_args())
    print(json.dumps(report, indent=2))
    if "orchestration_cpu_s_per_task" in report:
        print(summary(report), file=sys.stderr)


def summary(report: dict) -> str:
    """The figures a change is judged by, one a line (stderr; stdout is the JSON alone)."""
    cpu = report["cpu_s_per_task"]
    runs = ", ".join(f"{r['when']} {r['cpu_s_per_step']}" for r in report["engine"]["runs"])
    return "\n".join([
        f"orchestration_cpu_s_per_task  {report['orchestration_cpu_s_per_task']}  ("
        + ", ".join(f"{k} {cpu.get(k, 0.0)}" for k in ORCHESTRATION) + ")",
        f"billable_actions_per_task     {report['billable_actions_per_task']}",
        f"history_events_per_task       {report['history_events_per_task']}",
        f"orchestration_ratio           {report['orchestration_ratio']}  (engine CPU s per step: median "
        f"{report['engine_cpu_s_per_step']} of {runs}; spread {report['engine_spread']}"
        + ("" if report["orchestration_ratio_comparable"] else f"; runs under {ENGINE_MIN_WORKFLOWS}: not comparable")
        + ")",
        f"load average (1 min)          pipeline {report['load_avg_1m_pipeline']}, machine {report['machine']}",
    ])


if __name__ == "__main__":
    main()
