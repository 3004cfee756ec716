"""Chaos run (on demand: `make chaos`, or `reelqueue drill --chaos` on the running stack): N tasks
with webhooks on through SIGKILLed workers, restarts of Postgres, S3, Temporal and the gateway, and
provider faults at the rates given; then every invariant is checked (docs/reliability.md, "Chaos run").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, Field

from config.settings import ProviderLimits, Settings
from control.invariants import check_invariants, jobs_by_task
from emulator.wire import ALIVE, FaultRates

EXAMPLE_IMAGE = Path(__file__).resolve().parents[1] / "examples" / "images" / "aurora-lamp.png"
SERVICES = ("postgres", "s3", "temporal", "gateway")  # restarted during the run, in this order
STACK = ["postgres", "s3", "temporal", "emulator", "gateway"]  # `make chaos` starts these; the workers are ours
# Where a task's workflow runs each activity: the statuses in which a task may be running it (a
# kill aimed at that activity describes workflows in these statuses to find a worker running it).
# Kills aim at each in turn, the longer-running ones first.
ACTIVITIES: dict[str, tuple[str, ...]] = {
    "submit": ("DISPATCHING",),
    "fetch_output": ("OUTPUT_FETCHING",),
    "make_media": ("POST_PROCESSING",),
    "reconcile_submit": ("SUBMIT_UNKNOWN",),
    "poll_job": ("SUBMITTED", "RUNNING"),
    "request_slot": ("QUOTA_RESERVED", "QUEUED"),
    "prepare_task": ("CREATED", "VALIDATING"),
}
# lean-path-v1: validation, the reservation, the renditions and the settle of a task without review run inside
# prepare_task and make_media. A review's settle (and older runs' steps) run as local activities: Temporal lists
# no pending activity for them, so they cannot be aimed at; a kill of a worker in one is a kill of the workflow's.
ANY_STATUS = tuple(sorted({s for statuses in ACTIVITIES.values() for s in statuses}))
SAMPLE = 12  # workflows described per status group at each kill
SPAWN_TIMEOUT_S = 300.0  # a replacement worker must serve within this (restarts of Temporal included)
ENDED = ("SUCCEEDED", "CANCELED", "REJECTED", "FAILED_FINAL", "EXPIRED", "NEEDS_ATTENTION")
FAULT_STATS = ("submits_hung", "injected_429", "injected_5xx", "output_urls_expired", "outage_refusals",
               "webhooks_duplicated", "webhooks_reordered", "webhooks_dropped_injected")


class ChaosOptions(BaseModel):
    tasks: int = Field(default=1000, ge=1)
    workers: int = Field(default=3, ge=1)
    kills: int | None = None  # None: scaled with tasks (55 for 1,000)
    kill_every_s: float = 10.0
    restarts: int | None = None  # per service; None: 2, or 1 below 50 tasks
    gap_s: float = 15.0  # between two restarts
    in_flight: int | None = None  # one restart round waits for this many provider jobs; None: min(100, tasks/2)
    outage_s: float = 60.0  # one total provider outage (0: none)
    # Provider job time until the first restart round (jobs pile up to `in_flight`), then after it.
    load_job_seconds: float = 150.0
    job_seconds: float = 3.0
    job_jitter: float = 0.3
    limit: int = 150  # provider concurrency: admission and the emulator's running limit
    rates: FaultRates = Field(default_factory=lambda: FaultRates(
        submit_unknown=0.1, submit_429=0.1, submit_5xx=0.05, expire_output_url=0.1,
        duplicate_webhook=0.2, reorder_webhook=0.2, drop_webhook=0.2))
    seed: int = 23
    drain_timeout_s: float = 1800.0  # after the chaos, for every task to end (or NEEDS_ATTENTION)
    recovery_timeout_s: float = 300.0  # per restart: until the next task transition

    def kill_target(self) -> int:
        return self.kills if self.kills is not None else max(3, round(self.tasks * 0.055))

    def restart_rounds(self) -> int:
        return self.restarts if self.restarts is not None else (2 if self.tasks >= 50 else 1)

    def in_flight_target(self) -> int:
        return self.in_flight if self.in_flight is not None else max(1, min(100, self.tasks // 2))


class Kill(BaseModel):
    at_s: float
    pid: int
    aimed_at: str  # the activity type this kill went for ("any": none was seen running)
    running: list[str]  # activity types the victim was running (from Temporal), empty if none was seen
    task_ids: list[str] = Field(default_factory=list)


class Restart(BaseModel):
    service: str
    at_s: float
    in_flight: int  # provider jobs alive at the restart
    down_s: float = 0.0  # stop until it answered again
    to_progress_s: float | None = None  # from answering until the next task transition; None: none came
    error: str | None = None


class ChaosReport(BaseModel):
    tasks: int
    import_id: str
    queue: str  # the run's workers' task queue: its gates are `gate-{provider}-{queue}`
    seconds: float
    refusals_from_s: float | None  # when the 429 and 5xx rates were switched on (after the first round)
    kills: list[Kill]
    restarts: list[Restart]
    outage: dict[str, Any]
    faults: dict[str, int]
    by_status: dict[str, int]
    invariants: list[dict[str, Any]]
    violations: int
    spend: dict[str, Any]
    machine: dict[str, Any]
    ok: bool

    def kills_by_activity(self) -> dict[str, int]:
        return dict(Counter(kind for k in self.kills for kind in (k.running or ["(none seen)"])))


# -- the run ------------------------------------------------------------------------------------


async def run_chaos(settings: Settings, options: ChaosOptions, folder: Path,
                    say: Callable[[str], None] = lambda _: None) -> ChaosReport:
    """Import, start, break things while it runs, wait for every task to end, check, report."""
    from adapters.temporal_client import connect
    from control.starting import start_workflows

    settings = settings.model_copy(update={
        "webhooks_enabled": True,
        "provider_limits": {**settings.provider_limits, "emulator": ProviderLimits(max_concurrent=options.limit)},
    })
    run = _Run(settings, options, folder, say)
    import_id, tasks = await asyncio.to_thread(import_tasks, settings, folder, options.tasks)
    run.task_ids = {t.id for t in tasks}
    say(f"imported {len(tasks)} tasks ({import_id}); {options.workers} workers on {run.queue}")
    stats_before = run.emulator_setup()
    client = await connect(settings)
    run.client = client
    started = time.monotonic()
    run.t0 = started
    watching = asyncio.create_task(run.watch(import_id))
    try:
        await run.start_workers()
        starting = asyncio.create_task(start_workflows(client, tasks, import_id, run.queue))
        await asyncio.gather(run.killing(), run.restarting(), starting)
        say(f"chaos done: {len(run.kills)} kills, {len(run.restarts)} restarts; draining ...")
        by_status = await run.drain(import_id)
        await asyncio.gather(*run.measuring)
        seconds = time.monotonic() - started
        # Checked while the workers still serve the run's queue: its gate answers the slot rule's query.
        stats_after = _get(settings, "/_sim/stats")
        jobs = [j for j in _get(settings, "/_sim/jobs")["jobs"] if _task_of(j["request_key"]) in run.task_ids]
        per_task = jobs_by_task(j["request_key"] for j in jobs)
        checked = await check_run(settings, run.queue, import_id, {t: per_task.get(t, 0) for t in run.task_ids})
    finally:
        await run.stop(tasks[0].provider if tasks else None)
        watching.cancel()
    spend = await asyncio.to_thread(wasted_spend, settings, import_id, jobs)
    from bench.common import machine

    rules = [r.model_dump(mode="json") for r in checked.rules]
    return ChaosReport(
        tasks=len(tasks), import_id=import_id, queue=run.queue, seconds=round(seconds, 1),
        refusals_from_s=run.refusals_from_s, kills=run.kills, restarts=run.restarts,
        outage=run.outage, faults={k: stats_after.get(k, 0) - stats_before.get(k, 0) for k in FAULT_STATS},
        by_status=by_status, invariants=rules, violations=sum(r["violations"] for r in rules), spend=spend,
        machine=machine(), ok=run_ok(checked.ok, rules, by_status, run.restarts))


def run_ok(checked_ok: bool, rules: list[dict[str, Any]], by_status: dict[str, int], restarts: list[Restart]) -> bool:
    """Every rule decided (the run gives the checker all it needs) and none broken, every task ended,
    and every restart done: a restart that raised did not test what the run claims."""
    return (checked_ok and bool(rules) and all(r["checked"] for r in rules) and bool(by_status)
            and set(by_status) <= set(ENDED) and not any(r.error for r in restarts))


class _Run:
    """The run's moving parts: its workers, what it did to them and to the stack, and when."""

    def __init__(self, settings: Settings, options: ChaosOptions, folder: Path, say: Callable[[str], None]):
        self.settings, self.options, self.folder, self.say = settings, options, folder, say
        self.queue = f"chaos-{folder.name}"
        self.rng = random.Random(options.seed)
        self.client: Any = None
        self.t0 = time.monotonic()
        self.task_ids: set[str] = set()
        self.workers: list[subprocess.Popen[bytes]] = []
        self.all_workers: list[subprocess.Popen[bytes]] = []
        self.kills: list[Kill] = []
        self.restarts: list[Restart] = []
        self.outage: dict[str, Any] = {}
        self.refusals_from_s: float | None = None
        self.measuring: list[asyncio.Task[None]] = []  # recovery times still being measured
        self.done = asyncio.Event()  # every task ended: the chaos stops
        self._spawned = 0

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 1)

    def emulator_setup(self) -> dict[str, int]:
        """The load phase: long jobs, the run's limits, every fault rate (seeded) but the submit
        refusals; the stats before the run. A refusal halves the provider gate's admission limit
        (AIMD, workflows/provider_gate.py), so with the refusal rates on from the start the jobs in
        flight would never reach the first round's `in_flight`."""
        o = self.options
        rates = o.rates.model_copy(update={"seed": o.seed if o.rates.seed is None else o.rates.seed,
                                           "submit_429": 0.0, "submit_5xx": 0.0})
        self._faults(job_seconds=o.load_job_seconds, job_jitter=o.job_jitter, max_running=o.limit,
                     max_queued=o.limit * 2, rates=rates.model_dump())
        return _get(self.settings, "/_sim/stats")

    def refusals_on(self) -> None:
        """The fault phase: every rate as given (the RNG seeded again), short jobs."""
        o = self.options
        rates = o.rates.model_copy(update={"seed": (o.seed if o.rates.seed is None else o.rates.seed) + 1})
        self._faults(job_seconds=o.job_seconds, rates=rates.model_dump())
        self.refusals_from_s = self.now()
        self.say(f"  {self.now():6.0f}s submit refusals on "
                 f"(429 {o.rates.submit_429:.0%}, 5xx {o.rates.submit_5xx:.0%})")

    def _faults(self, **body: Any) -> None:
        httpx.post(f"{self.settings.emulator_url}/_sim/faults", json=body, timeout=10).raise_for_status()

    # -- workers -----------------------------------------------------------------------------

    async def start_workers(self) -> None:
        await asyncio.gather(*(self.spawn() for _ in range(self.options.workers)))

    async def spawn(self) -> None:
        """A new worker process, started again (as a supervisor would) while it exits before serving
        (`worker.py` waits for Temporal up to REELQUEUE_WORKER_CONNECT_WAIT_S, then ends)."""
        from devstack.drill import DrillError, start_worker, wait_worker_ready

        deadline = time.monotonic() + SPAWN_TIMEOUT_S
        while True:
            self._spawned += 1
            role = f"w{self._spawned}"
            proc = start_worker(self.settings, self.folder, role, self.queue, {})
            self.all_workers.append(proc)
            try:
                await wait_worker_ready(proc, self.folder, role)
            except DrillError:
                if proc.poll() is None:  # still waiting for Temporal past READY_TIMEOUT_S: not a second one
                    proc.kill()
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(2.0)
                continue
            self.workers.append(proc)
            return

    async def killing(self) -> None:
        """SIGKILL a worker (its process group: ffmpeg children too) every kill_every_s until the target
        is reached and every activity type was hit mid-run (or every task ended); a new worker replaces
        each. Each kill goes to a worker Temporal says is running the activity type hit least so far;
        past the target, only to one running a type not hit yet."""
        target = self.options.kill_target()
        while not self.done.is_set():
            hit = Counter(kind for k in self.kills for kind in k.running)
            missing = [kind for kind in ACTIVITIES if not hit[kind]]
            if len(self.kills) >= target and not missing:
                return
            await self._sleep(self.options.kill_every_s)
            if self.done.is_set():
                return
            running = await self._running_activities(missing or list(ACTIVITIES))
            chosen = self._choose(running, hit, missing if len(self.kills) >= target else None)
            if chosen is None:
                continue
            victim, aimed, kinds, task_ids = chosen
            with contextlib.suppress(ProcessLookupError):
                os.killpg(victim.pid, signal.SIGKILL)
            await asyncio.to_thread(victim.wait)
            self.workers.remove(victim)
            self.kills.append(Kill(at_s=self.now(), pid=victim.pid, aimed_at=aimed, running=kinds, task_ids=task_ids))
            await self.spawn()

    def _choose(self, running: list[tuple[int, str, str]], hit: Counter[str], need: list[str] | None,
                ) -> tuple[subprocess.Popen[bytes], str, list[str], list[str]] | None:
        """(worker, the type aimed at, the types and tasks it runs): one running the type hit least so
        far (of `need` when given), else any worker (None when `need` is given: no kill this time)."""
        by_pid = {p.pid: p for p in self.workers}
        candidates = [r for r in running if r[0] in by_pid and (need is None or r[1] in need)]
        if not candidates:
            return None if need is not None else (self.rng.choice(self.workers), "any", [], [])
        least = min(hit[kind] for _, kind, _ in candidates)
        pid, aimed, _ = self.rng.choice([r for r in candidates if hit[r[1]] == least])
        mine = [(kind, task) for p, kind, task in running if p == pid]
        return by_pid[pid], aimed, sorted({k for k, _ in mine}), sorted({t for _, t in mine})

    async def _running_activities(self, kinds: list[str]) -> list[tuple[int, str, str]]:
        """(worker pid, activity type, task) of activities STARTED in a sample of the run's workflows:
        some whose task is in a status where one of `kinds` runs, some in any status (Temporal's pending
        activities name the worker's identity, pid@host)."""
        from temporalio.api.enums.v1 import PendingActivityState

        groups = {ACTIVITIES[kind] for kind in kinds} | {ANY_STATUS}
        samples = await asyncio.gather(*(asyncio.to_thread(self._tasks_in, g, SAMPLE) for g in groups))
        sample = dict(pair for rows in samples for pair in rows)
        found: list[tuple[int, str, str]] = []

        async def one(task_id: str, workflow_id: str) -> None:
            with contextlib.suppress(Exception):  # a workflow that just closed, Temporal restarting
                desc = await self.client.get_workflow_handle(workflow_id).describe()
                for act in desc.raw_description.pending_activities:
                    if act.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED:
                        pid = act.last_worker_identity.partition("@")[0]
                        if pid.isdigit():
                            found.append((int(pid), act.activity_type.name, task_id))

        await asyncio.gather(*(one(t, w) for t, w in sample.items()))
        return found

    def _tasks_in(self, statuses: tuple[str, ...], limit: int) -> list[tuple[str, str]]:
        from sqlalchemy import text

        try:
            with _db(self.settings).transaction() as session:
                rows = session.execute(text(
                    "SELECT id, workflow_id FROM tasks WHERE id = ANY(:ids) AND status = ANY(:st) "
                    "ORDER BY random() LIMIT :n"), {"ids": list(self.task_ids), "st": list(statuses), "n": limit}).all()
        except Exception:  # Postgres restarting: no sample this time
            return []
        return [(r[0], r[1]) for r in rows]

    # -- the stack -----------------------------------------------------------------------------

    async def restarting(self) -> None:
        """Rounds of restarts (Postgres, S3, Temporal, gateway in turn), the first once enough jobs are in
        flight at the provider; the total provider outage after the first round."""
        o = self.options
        await self._wait_in_flight(o.in_flight_target(), timeout_s=300)
        for round_no in range(o.restart_rounds()):
            for service in SERVICES:
                if round_no or service != SERVICES[0]:
                    await self._sleep(o.gap_s)
                self.restarts.append(await self.restart(service))
            if round_no == 0:
                await asyncio.to_thread(self.refusals_on)
            if round_no == 0 and o.outage_s > 0:
                await self._sleep(o.gap_s)
                await self.provider_outage(o.outage_s)

    async def restart(self, service: str) -> Restart:
        import devstack

        in_flight = await asyncio.to_thread(self.in_flight)
        at = self.now()
        self.say(f"  {at:6.0f}s restart {service} ({in_flight} jobs in flight)")
        started = time.monotonic()
        entry = Restart(service=service, at_s=at, in_flight=in_flight)
        try:
            await asyncio.to_thread(devstack.restart_service, self.settings, service)
        except Exception as exc:  # the row says so; the run goes on with what came back
            entry.error = f"{type(exc).__name__}: {exc}"
        entry.down_s = round(time.monotonic() - started, 1)
        up_at = datetime.now(UTC)
        self.measuring.append(asyncio.create_task(self._progress_after(entry, up_at)))
        return entry

    async def _progress_after(self, entry: Restart, up_at: datetime) -> None:
        """Measured beside the run (the next restart does not wait for it)."""
        entry.to_progress_s = await self._next_transition(up_at)

    async def provider_outage(self, seconds: float) -> None:
        """Every provider call (submit, status, list, cancel) answers 503 for `seconds`."""
        self.say(f"  {self.now():6.0f}s provider outage {seconds:.0f}s")
        self._faults(**{name: seconds for name in ("submit_outage_s", "status_outage_s", "list_outage_s",
                                                   "cancel_outage_s")})
        self.outage = {"at_s": self.now(), "seconds": seconds, "in_flight": await asyncio.to_thread(self.in_flight)}
        await self._sleep(seconds)

    def in_flight(self) -> int:
        """Provider jobs of the run queued, throttled or running at the emulator."""
        try:
            jobs = _get(self.settings, "/_sim/jobs")["jobs"]
        except httpx.HTTPError:
            return -1
        return sum(j["status"] in ALIVE and _task_of(j["request_key"]) in self.task_ids for j in jobs)

    async def _wait_in_flight(self, target: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self.done.is_set():
            if await asyncio.to_thread(self.in_flight) >= target:
                return
            await asyncio.sleep(1.0)

    async def _next_transition(self, since: datetime) -> float | None:
        """Seconds from `since` until a state event of the run is recorded after it (the pipeline moved);
        None if none came before the run ended or within recovery_timeout_s."""
        from sqlalchemy import text

        deadline = time.monotonic() + self.options.recovery_timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                with _db(self.settings).transaction() as session:
                    first = session.execute(text(
                        "SELECT min(e.created_at) FROM state_events e JOIN tasks t ON t.id = e.task_id "
                        "WHERE t.id = ANY(:ids) AND e.created_at > :since"),
                        {"ids": list(self.task_ids), "since": since}).scalar()
                if first is not None:
                    return round((first - since).total_seconds(), 1)
            if self.done.is_set():
                return None
            await asyncio.sleep(0.5)
        return None

    async def drain(self, import_id: str) -> dict[str, int]:
        """Until every task ended (terminal or NEEDS_ATTENTION), bounded; the statuses then."""
        deadline = time.monotonic() + self.options.drain_timeout_s
        counts: dict[str, int] = {}
        while time.monotonic() < deadline:
            counts = await asyncio.to_thread(self._status_counts, import_id)
            if counts and set(counts) <= set(ENDED):
                break
            await asyncio.sleep(2.0)
        return counts

    def _status_counts(self, import_id: str) -> dict[str, int]:
        from schema import queries

        try:
            with _db(self.settings).transaction() as session:
                return queries.status_counts(session, import_id)
        except Exception:
            return {}

    async def watch(self, import_id: str) -> None:
        """Set `done` once every task ended (the kills and restarts stop then); the counts every 30 s."""
        shown = time.monotonic()
        while not self.done.is_set():
            counts = await asyncio.to_thread(self._status_counts, import_id)
            if counts and set(counts) <= set(ENDED):
                self.done.set()
            if time.monotonic() - shown > 30:
                shown = time.monotonic()
                self.say(f"  {self.now():6.0f}s " + ", ".join(f"{k} {n}" for k, n in sorted(counts.items())))
            await asyncio.sleep(2.0)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.done.wait(), seconds)

    async def stop(self, provider: str | None) -> None:
        from control.gates import stop_gates
        from devstack.drill import stop_worker

        self.done.set()
        await asyncio.gather(*(asyncio.to_thread(stop_worker, p) for p in self.all_workers))
        with contextlib.suppress(Exception):
            httpx.delete(f"{self.settings.emulator_url}/_sim/faults", timeout=10)
        if provider is not None and self.client is not None:
            with contextlib.suppress(Exception):
                await stop_gates(self.client, self.queue, [provider])


# -- import, checks, spend ----------------------------------------------------------------------


def import_tasks(settings: Settings, folder: Path, count: int) -> tuple[str, list]:
    """`count` one-second tasks of one catalog (one image and title: the emulator's render cache
    serves most clips, so the run is about orchestration under faults, not rendering)."""
    from bench.common import one_second_plan
    from catalog.plan import load_plan
    from catalog.service import run_import
    from schema import queries

    (folder / "images").mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLE_IMAGE, folder / "images" / "lamp.png")
    lines = ["product_id,title,description,image_url,price,currency,category"]
    lines += [f"X-{i:06d},Chaos lamp,A lamp for the chaos run,images/lamp.png,19.99,USD,Home" for i in range(count)]
    (folder / "catalog.csv").write_text("\n".join(lines) + "\n")
    (folder / "plan.toml").write_text(one_second_plan("chaos"))
    summary = run_import(settings, folder / "catalog.csv", load_plan(folder / "plan.toml"),
                         catalog=f"chaos-{folder.name}", check_urls=False)
    if summary.status != "ACCEPTED" or not summary.import_id:
        raise RuntimeError(f"the chaos catalog was not accepted ({summary.status}); report {summary.report}")
    with _db(settings).transaction() as session:
        return summary.import_id, queries.list_tasks(session, summary.import_id)


async def check_run(settings: Settings, queue: str, import_id: str, provider_jobs: dict[str, int]) -> Any:  # noqa: ANN401
    """control/invariants.py's report over the run's import, with the emulator's jobs per task. Its
    workflows ran on the run's own queue, so their gates are that queue's (`gate-{provider}-{queue}`):
    the slot rule asks those. Every writer is idle once every task ended, so an object without its
    row is an orphan at once."""
    return await check_invariants(settings.model_copy(update={"task_queue": queue}), import_id=import_id,
                                  provider_jobs=provider_jobs, orphan_safety_s=0)


def wasted_spend(settings: Settings, import_id: str, jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """`spend_by_cause` over the run's tasks, attempts and duplicate jobs; the ledger's sums beside it."""
    from sqlalchemy import text

    scope = {"i": import_id}
    with _db(settings).transaction() as session:
        tasks = {r[0]: (r[1], r[2]) for r in session.execute(text(
            "SELECT id, status, current_attempt_no FROM tasks WHERE import_id = :i"), scope).all()}
        bound = {(r[0], r[1]): r[2] for r in session.execute(text(
            "SELECT a.task_id, a.attempt_no, a.provider_job_id FROM attempts a JOIN tasks t ON t.id = a.task_id "
            "WHERE t.import_id = :i"), scope).all()}
        strays = dict(session.execute(text(
            "SELECT s.provider_job_id, s.found_by FROM stray_jobs s JOIN tasks t ON t.id = s.task_id "
            "WHERE t.import_id = :i"), scope).all())
        ledger = {k: float(v) for k, v in session.execute(text(
            "SELECT c.entry_type, sum(c.amount) FROM credit_ledger c JOIN tasks t ON t.id = c.task_id "
            "WHERE t.import_id = :i GROUP BY c.entry_type"), scope).all()}
    return spend_by_cause(jobs, tasks, bound, strays) | {"ledger": ledger}


def spend_by_cause(jobs: list[dict[str, Any]], tasks: dict[str, tuple[str, int | None]],
                   bound: dict[tuple[str, int], str | None], strays: dict[str, str]) -> dict[str, Any]:
    """What the provider charged (its jobs' usage) and the share that bought no video, by cause:
    `duplicate_job:{found_by}` (a job other than the one its attempt is bound to, as stray_jobs found
    it; `unrecorded` if it did not), `superseded_attempt` (a job of an attempt other than the one whose
    video the task kept), `no_video:{status}` (a job of a task that ended without SUCCEEDED).
    `tasks`: id -> (status, current attempt); `bound`: (task, attempt no) -> job id; `strays`: job id -> found_by."""
    total, wasted = 0.0, Counter[str]()
    for job in jobs:
        cost = float((job.get("usage") or {}).get("cost") or 0.0)
        total += cost
        if not cost:
            continue
        task_id, attempt_no = _task_of(job["request_key"]), _attempt_of(job["request_key"])
        status, kept = tasks.get(task_id, ("UNKNOWN_TASK", None))
        if bound.get((task_id, attempt_no or 0)) != job["id"]:
            wasted[f"duplicate_job:{strays.get(job['id'], 'unrecorded')}"] += cost
        elif status != "SUCCEEDED":
            wasted[f"no_video:{status}"] += cost
        elif attempt_no != kept:
            wasted["superseded_attempt"] += cost
    waste = sum(wasted.values())
    return {"provider_total": round(total, 2), "wasted": round(waste, 2),
            "wasted_share": round(waste / total, 4) if total else 0.0,
            "by_cause": {k: round(v, 2) for k, v in sorted(wasted.items())}}


def run_folder(settings: Settings) -> Path:
    """`$REELQUEUE_HOME/chaos/<run id>/`: the run's catalog, plan and worker logs (its name is the run's queue)."""
    folder = settings.home.expanduser().resolve() / "chaos" / f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    folder.mkdir(parents=True)
    return folder


def _task_of(request_key: str) -> str:
    return request_key.rpartition("-a")[0]


def _attempt_of(request_key: str) -> int | None:
    tail = request_key.rpartition("-a")[2]
    return int(tail) if tail.isdigit() else None


def _get(settings: Settings, path: str) -> dict[str, Any]:
    response = httpx.get(f"{settings.emulator_url.rstrip('/')}{path}", timeout=30)
    response.raise_for_status()
    return response.json()


def _db(settings: Settings):  # noqa: ANN202 - schema.db.Database
    from schema.db import Database

    return Database(settings.database_url)


# -- output ---------------------------------------------------------------------------------------


def print_report(report: ChaosReport, console: Any) -> None:  # noqa: ANN401 - a rich Console
    """The run as tables: what was done to it, how the tasks ended, each invariant, the spend."""
    from rich.table import Table

    done = Table("what", "count", "detail", title=f"chaos run: {report.tasks} tasks in {report.seconds:.0f} s")
    done.add_row("worker kills (SIGKILL)", str(len(report.kills)),
                 ", ".join(f"{k} {n}" for k, n in sorted(report.kills_by_activity().items())))
    for service in SERVICES:
        rows = [r for r in report.restarts if r.service == service]
        done.add_row(f"restarts: {service}", str(len(rows)), "; ".join(
            f"{r.in_flight} in flight, down {r.down_s} s, progress +{r.to_progress_s} s" + (f" ({r.error})" if r.error
                                                                                          else "") for r in rows))
    if report.outage:
        outage = report.outage
        done.add_row("provider outage", "1", f"{outage['seconds']:.0f} s, {outage['in_flight']} in flight")
    for name, n in report.faults.items():
        done.add_row(f"fault: {name}", str(n), "")
    console.print(done)
    outcomes = Table("status", "tasks", title="outcomes")
    for status, n in sorted(report.by_status.items()):
        outcomes.add_row(status, str(n))
    console.print(outcomes)
    rules = Table("invariant", "checked", "violations", "tasks", "detail", title="invariants")
    rules.columns[4].overflow = "fold"
    for rule in report.invariants:
        style = "" if rule["violations"] == 0 else "[red]"
        rules.add_row(rule["rule"], "yes" if rule["checked"] else "[red]no", f"{style}{rule['violations']}",
                      ", ".join(rule["task_ids"][:3]), rule["detail"])
    console.print(rules)
    spend = report.spend
    console.print(f"spend at the provider {spend['provider_total']}, wasted {spend['wasted']} "
                  f"({spend['wasted_share']:.1%}): " + (", ".join(f"{k} {v}" for k, v in spend["by_cause"].items())
                                                        or "nothing"))
    verdict = ("[bold green]no invariant violated" if report.ok else
               f"[bold red]{report.violations} violation(s), a rule not checked, or a restart failed")
    failed = sum(r.error is not None for r in report.restarts)
    console.print(verdict + ("" if set(report.by_status) <= set(ENDED) else "; [red]tasks still running")
                  + (f"; [red]{failed} restart(s) failed" if failed else ""))


def parse_args(argv: list[str] | None = None) -> tuple[ChaosOptions, argparse.Namespace]:
    d = ChaosOptions()
    r = d.rates
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--tasks", type=int, default=d.tasks)
    p.add_argument("--workers", type=int, default=d.workers, help="worker processes (each killed in turn)")
    p.add_argument("--kills", type=int, default=None, help="worker SIGKILLs (default: 5.5 %% of tasks, at least 3)")
    p.add_argument("--kill-every", dest="kill_every_s", type=float, default=d.kill_every_s, help="seconds")
    p.add_argument("--restarts", type=int, default=None, help="restarts of each service (default 2; 1 below 50 tasks)")
    p.add_argument("--gap", dest="gap_s", type=float, default=d.gap_s, help="seconds between restarts")
    p.add_argument("--in-flight", type=int, default=None,
                   help="provider jobs alive before the first restart round (default min(100, tasks/2))")
    p.add_argument("--outage", dest="outage_s", type=float, default=d.outage_s, help="total provider outage, s")
    p.add_argument("--load-job-seconds", type=float, default=d.load_job_seconds,
                   help="provider job time until the first restart round")
    p.add_argument("--job-seconds", type=float, default=d.job_seconds, help="provider job time after it")
    p.add_argument("--job-jitter", type=float, default=d.job_jitter)
    p.add_argument("--limit", type=int, default=d.limit, help="provider concurrency")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--drain-timeout", dest="drain_timeout_s", type=float, default=d.drain_timeout_s)
    p.add_argument("--recovery-timeout", dest="recovery_timeout_s", type=float, default=d.recovery_timeout_s)
    for name, help_text in (("submit_unknown", "submits whose answer never comes"), ("submit_429", "submits 429"),
                            ("submit_5xx", "submits 5xx"), ("expire_output_url", "output URLs dead at once"),
                            ("duplicate_webhook", "webhooks sent twice"), ("reorder_webhook", "webhooks held back"),
                            ("drop_webhook", "webhooks never sent")):
        p.add_argument(f"--{name.replace('_', '-')}", type=float, default=getattr(r, name), help=f"rate: {help_text}")
    p.add_argument("--use-stack", action="store_true", help="the running stack ($REELQUEUE_HOME), not a fresh one")
    p.add_argument("--keep", action="store_true", help="leave the fresh stack running")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = p.parse_args(argv)
    rates = FaultRates(**{name: getattr(args, name) for name in FaultRates.model_fields if name != "seed"})
    fields = {k: getattr(args, k) for k in ChaosOptions.model_fields if k != "rates"}
    return ChaosOptions(**fields, rates=rates), args


def main(argv: list[str] | None = None) -> None:
    from rich.console import Console

    import devstack
    from bench.common import fresh_home

    options, args = parse_args(argv)
    err = Console(stderr=True)
    say = err.print
    home: Path | None = None
    if not args.use_stack:
        home = fresh_home("reelqueue-chaos-")
        os.environ["REELQUEUE_EMULATOR_RENDER"] = "fast"
        os.environ["REELQUEUE_EMULATOR_MAX_RUNNING"] = str(options.limit)
        os.environ["REELQUEUE_EMULATOR_MAX_QUEUED"] = str(options.limit * 2)
        say(f"starting a stack in {home} ...")
        devstack.up(Settings(), services=STACK)
    settings = devstack.effective_settings(Settings())
    folder = run_folder(settings)
    try:
        report = asyncio.run(run_chaos(settings, options, folder, say))
    finally:
        if not args.use_stack and not args.keep:
            devstack.down(settings)
    if args.json:
        print(json.dumps(report.model_dump(mode="json") | {"kills_by_activity": report.kills_by_activity()},
                         indent=2))
    else:
        print_report(report, Console())
    if report.ok and home is not None and not args.keep:  # a failed run keeps its stack's home and logs
        shutil.rmtree(home, ignore_errors=True)
    else:
        say(f"logs: {folder}")
    raise SystemExit(0 if report.ok else 1)


if __name__ == "__main__":
    main()
