"""Crash drills: arm one failpoint in a real worker process, let it die there, recover, check.

For each failpoint (activities/failpoints.py), `run_drills`:
1. imports a one-product, one-task catalog (1 s clip) under a catalog name of its own, so every
   drill makes a new task;
2. starts `python worker.py` with `REELQUEUE_FAILPOINTS="{point}=crash"` on a task queue of its own
   (the stack's worker never sees the drill's workflow) and starts the task's workflow there;
3. waits until that process dies by SIGKILL (the failpoint), or reports that it never got there;
4. records what recovery will find: task status, attempt states, asset rows, stored objects;
5. starts a clean worker on the same queue and waits for the workflow's result;
6. checks the task ended SUCCEEDED, the emulator holds exactly one job for it, and every invariant
   of control/invariants.py holds for the drill's import (its ledger balanced, its state events
   allowed, its objects' bytes, no orphan object, no attempt left SENDING, no slot held, ...).

Every worker gets its own REELQUEUE_HOME under the drill's folder (with every setting passed in
its environment), so it never touches the stack's worker ready file. Every process started here
is stopped before `run_drills` returns, whatever happened. Logs stay in
`$REELQUEUE_HOME/drills/<run id>/<point>/`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, Field, computed_field
from sqlalchemy import func, select

from activities.failpoints import ENV as FAILPOINTS_ENV
from activities.failpoints import POINTS
from config.settings import Settings

from . import probes
from .procs import private_log

REPO_ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_IMAGE = REPO_ROOT / "examples" / "images" / "aurora-lamp.png"

READY_TIMEOUT_S = 60.0  # a worker process polls its queue within this
REACH_TIMEOUT_S = 120.0  # from the workflow start until the armed worker must have died
RECOVERY_TIMEOUT_S = 180.0  # from the clean worker's start until the workflow's result
STOP_TIMEOUT_S = 10.0

OK_OUTCOME = "SUCCEEDED"
NOT_REACHED = "FAILPOINT_NOT_REACHED"
WORKER_EXITED = "WORKER_EXITED"  # the armed worker ended, but not by SIGKILL
DRILL_ERROR = "DRILL_ERROR"  # the drill itself could not run (import, worker start, ...)

_PLAN = """\
name = "drill"
locales = ["en-US"]
aspect_ratios = ["9:16"]

[[variants]]
id = "a"
hook = {{ "en-US" = "Drill" }}

[[templates]]
id = "drill"
version = "drill-v1"
duration_s = {duration_s}
provider = "emulator"
model = "emu-motion-1"
cost_estimate = {cost}
[templates.prompts]
"en-US" = "Product shot of {{title}}, {{price}}. {{hook}}"
"""


class DrillError(Exception):
    """The drill could not run at all (services unreachable, unknown point)."""


class DrillResult(BaseModel):
    point: str
    task_id: str | None = None
    workflow_id: str | None = None
    task_queue: str = ""
    reached: bool = False  # the armed worker died by SIGKILL (the failpoint fired)
    worker_exit: str | None = None  # how the armed worker ended: SIGKILL, exit N, still running
    evidence: dict[str, Any] = Field(default_factory=dict)  # found on recovery, before the clean worker ran
    outcome: str = DRILL_ERROR  # the task's final status, or one of the drill outcomes above
    provider_jobs: int | None = None  # emulator jobs whose request key starts with the task id
    ledger: dict[str, float] = Field(default_factory=dict)  # sums by entry type
    ledger_balanced: bool = False  # a reservation made, and no ledger rule of the invariant checker broken
    ledger_violations: list[str] | None = None  # schema.ledger_check's findings
    invariants: dict[str, int] = Field(default_factory=dict)  # rule -> violations (control/invariants.py)
    invariants_unchecked: list[str] = Field(default_factory=list)  # rules the checker could not decide
    attempts_after: list[dict[str, Any]] = Field(default_factory=list)
    ok: bool = False
    error: str | None = None
    seconds: dict[str, float] = Field(default_factory=dict)  # to_failpoint, recovery, total
    logs: str | None = None  # the drill's folder: catalog, worker logs

    @computed_field  # type: ignore[prop-decorator]
    @property
    def evidence_text(self) -> str:
        return evidence_text(self.evidence)


def evidence_text(ev: dict[str, Any]) -> str:
    """`SUBMITTED; a1 ACKED + job id; 1 provider job; rows -; objects -; ledger RESERVE`: one table cell."""
    if not ev:
        return "-"
    attempts = ", ".join(
        f"a{a['attempt_no']} {a['submit_state']}" + (" + job id" if a.get("provider_job_id") else ", no job id")
        for a in ev.get("attempts", [])
    ) or "no attempt"
    jobs = ev.get("provider_jobs")
    rows = ", ".join(f"{k} {n}" for k, n in sorted(ev.get("assets", {}).items())) or "-"
    objects = ", ".join(f"{k} {n}" for k, n in sorted(ev.get("objects", {}).items())) or "-"
    ledger = " ".join(sorted(ev.get("ledger", {}))) or "-"
    return (f"{ev.get('status')}; {attempts}; {jobs} provider job{'' if jobs == 1 else 's'}; "
            f"rows {rows}; objects {objects}; ledger {ledger}")


def check_points(points: Sequence[str]) -> list[str]:
    unknown = [p for p in points if p not in POINTS]
    if unknown:
        raise DrillError(f"unknown failpoint(s) {', '.join(unknown)}; known: {', '.join(POINTS)}")
    return list(points) or list(POINTS)


def preflight(settings: Settings) -> None:
    """One clear line if a service the drills need does not answer."""
    hint = "is the stack up? (reelqueue dev up)"
    if not probes.postgres_ok(settings.database_url):
        raise DrillError(f"cannot reach Postgres ({_safe_url(settings.database_url)}); {hint}")
    s3 = f"{'https' if settings.s3_secure else 'http'}://{settings.s3_endpoint}/"
    if probes.http_status(s3) is None:
        raise DrillError(f"cannot reach object storage ({s3}); {hint}")
    host, port = probes.split_address(settings.temporal_address)
    if not probes.tcp_open(host, port):
        raise DrillError(f"cannot reach Temporal ({settings.temporal_address}); {hint}")
    if not probes.http_ok(settings.emulator_url.rstrip("/") + "/healthz"):
        raise DrillError(f"cannot reach the provider emulator ({settings.emulator_url}); {hint}")


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


async def run_drills(
    settings: Settings,
    points: Sequence[str] = (),
    *,
    parallel: int = 0,
    duration_s: int = 1,
    reach_timeout_s: float = REACH_TIMEOUT_S,
    recovery_timeout_s: float = RECOVERY_TIMEOUT_S,
    on_result: Callable[[DrillResult], None] | None = None,
) -> list[DrillResult]:
    """One drill per point (all of POINTS by default), `parallel` at a time (0 = all at once)."""
    from adapters.temporal_client import connect

    points = check_points(points)
    preflight(settings)
    client = await connect(settings)
    run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    root = settings.home.expanduser().resolve() / "drills" / run_id
    limit = asyncio.Semaphore(parallel if parallel > 0 else len(points))

    async def one(point: str) -> DrillResult:
        async with limit:
            drill = _Drill(settings, client, point, root / point, run_id, duration_s,
                           reach_timeout_s, recovery_timeout_s)
            result = await drill.run()
        if on_result is not None:
            on_result(result)
        return result

    with _sigterm_cancels():
        return list(await asyncio.gather(*(one(p) for p in points)))


@contextlib.contextmanager
def _sigterm_cancels():  # noqa: ANN202 - a context manager
    """SIGTERM cancels the drills (so every worker they started is stopped) instead of ending us at once."""
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    installed = False
    if main is not None and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:  # nobody else handles it
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # not the main thread
            loop.add_signal_handler(signal.SIGTERM, main.cancel)
            installed = True
    try:
        yield
    finally:
        if installed:
            loop.remove_signal_handler(signal.SIGTERM)  # back to SIG_DFL, as it was


class _Drill:
    def __init__(self, settings: Settings, client: Any, point: str, folder: Path, run_id: str, duration_s: int,
                 reach_timeout_s: float, recovery_timeout_s: float):
        self.settings = settings
        self.client = client
        self.point = point
        self.folder = folder
        self.catalog = f"drill-{point}-{run_id}"
        self.queue = f"drill-{run_id}-{point}"
        self.duration_s = duration_s
        self.reach_timeout_s = reach_timeout_s
        self.recovery_timeout_s = recovery_timeout_s
        self.procs: list[subprocess.Popen[bytes]] = []
        self.import_id: str | None = None
        self.provider: str | None = None
        self.result = DrillResult(point=point, task_queue=self.queue, logs=str(folder))

    async def run(self) -> DrillResult:
        r = self.result
        started = time.monotonic()
        try:
            await self._run(r)
        except Exception as exc:  # the row says what went wrong; the other drills go on
            r.error = r.error or f"{type(exc).__name__}: {exc}"
        finally:
            await _stop_all(self.procs)
            await self._stop_gate()
            r.seconds["total"] = round(time.monotonic() - started, 1)
            r.ok = (r.error is None and r.reached and r.outcome == OK_OUTCOME and r.provider_jobs == 1
                    and r.ledger_balanced and not r.invariants and not r.invariants_unchecked)
        return r

    async def _run(self, r: DrillResult) -> None:
        from control.starting import start_workflows

        task, import_id = await asyncio.to_thread(self._import)
        self.import_id = import_id
        r.task_id, r.workflow_id = task.id, task.workflow_id
        self.provider = task.provider

        armed = self._start_worker("crash", {FAILPOINTS_ENV: f"{self.point}=crash"})
        await self._wait_ready(armed, "crash")
        await start_workflows(self.client, [task], import_id, self.queue)
        t0 = time.monotonic()
        code = await wait_exit(armed, self.reach_timeout_s)
        r.seconds["to_failpoint"] = round(time.monotonic() - t0, 1)
        if code is None:
            r.worker_exit = "still running"
            r.outcome = NOT_REACHED
            r.error = f"failpoint never reached: the armed worker was alive after {self.reach_timeout_s:.0f}s"
            r.evidence = await asyncio.to_thread(self._evidence, task.id)
            return
        r.worker_exit = _exit_text(code)
        if code != -signal.SIGKILL:
            r.outcome = WORKER_EXITED
            r.error = f"the armed worker ended with {r.worker_exit}, not by the failpoint's SIGKILL"
            return
        r.reached = True
        r.evidence = await asyncio.to_thread(self._evidence, task.id)

        self._start_worker("recover", {})
        t1 = time.monotonic()
        try:
            await asyncio.wait_for(self.client.get_workflow_handle(task.workflow_id).result(),
                                   timeout=self.recovery_timeout_s)
        except TimeoutError:
            r.error = f"no workflow result within {self.recovery_timeout_s:.0f}s of the clean worker's start"
        except Exception as exc:  # WorkflowFailureError: the task's own status says more
            r.error = f"workflow closed with {type(exc).__name__}: {getattr(exc, 'cause', None) or exc}"
        r.seconds["recovery"] = round(time.monotonic() - t1, 1)
        await asyncio.to_thread(self._check, r, task.id)
        await self._invariants(r, task.id)

    async def _stop_gate(self) -> None:
        """The drill's queue is served no more: its provider's gate must not wait there for ever."""
        from control.gates import stop_gates

        if self.provider is not None:
            with contextlib.suppress(Exception):  # cleanup: the drill's row already says what happened
                await stop_gates(self.client, self.queue, [self.provider])

    # -- steps -------------------------------------------------------------------------------

    def _import(self):  # noqa: ANN202 - (schema.models.Task, import id)
        from catalog.plan import load_plan
        from catalog.service import run_import
        from schema import queries
        from schema.db import Database

        images = self.folder / "images"
        images.mkdir(parents=True, exist_ok=True)
        shutil.copy(EXAMPLE_IMAGE, images / EXAMPLE_IMAGE.name)
        csv = self.folder / "catalog.csv"
        csv.write_text("product_id,title,description,image_url,price,currency,category\n"
                       f"DRILL-1,Drill lamp,A lamp for the {self.point} drill,images/{EXAMPLE_IMAGE.name},"
                       "19.99,USD,Home\n")
        plan_file = self.folder / "plan.toml"
        plan_file.write_text(_PLAN.format(duration_s=self.duration_s, cost=self.duration_s + 1))
        summary = run_import(self.settings, csv, load_plan(plan_file), catalog=self.catalog, check_urls=False)
        if summary.status != "ACCEPTED" or not summary.import_id:
            raise DrillError(f"the drill catalog was not accepted ({summary.status}); report {summary.report}")
        with Database(self.settings.database_url).transaction() as session:
            tasks = queries.list_tasks(session, summary.import_id)
        if len(tasks) != 1:
            raise DrillError(f"the drill catalog made {len(tasks)} tasks, expected 1")
        return tasks[0], summary.import_id

    def _start_worker(self, role: str, extra_env: dict[str, str]) -> subprocess.Popen[bytes]:
        proc = start_worker(self.settings, self.folder, role, self.queue, extra_env)
        self.procs.append(proc)
        return proc

    async def _wait_ready(self, proc: subprocess.Popen[bytes], role: str) -> None:
        await wait_worker_ready(proc, self.folder, role)

    def _evidence(self, task_id: str) -> dict[str, Any]:
        from schema import queries
        from schema.db import Database

        with Database(self.settings.database_url).transaction() as session:
            detail = queries.task_detail(session, task_id) or {}
        task = detail.get("task", {})
        assets: dict[str, int] = {}
        for a in detail.get("assets", []):
            assets[a["kind"]] = assets.get(a["kind"], 0) + 1
        return {
            "status": task.get("status"),
            "attempts": [{k: a[k] for k in ("attempt_no", "submit_state", "provider_job_id", "provider_status")}
                         for a in detail.get("attempts", [])],
            "assets": assets,
            "objects": self._objects(task.get("tenant", self.settings.tenant), task_id),
            "provider_jobs": provider_jobs(self.settings, task_id),
            "ledger": {k: float(v) for k, v in ledger_sums(self.settings, task_id).items()},
        }

    def _objects(self, tenant: str, task_id: str) -> dict[str, int]:
        """Objects under the task's prefix, counted by folder (raw, staging, proxy, hls, thumbnail)."""
        from adapters.storage import ObjectStorage

        storage = ObjectStorage.from_settings(self.settings)
        prefix = f"tenants/{tenant}/tasks/{task_id}/"
        counts: dict[str, int] = {}
        for obj in storage.client.list_objects(storage.bucket, prefix=prefix, recursive=True):
            folder = obj.object_name[len(prefix):].split("/", 1)[0]
            counts[folder] = counts.get(folder, 0) + 1
        return counts

    def _check(self, r: DrillResult, task_id: str) -> None:
        from schema import queries
        from schema.db import Database

        with Database(self.settings.database_url).transaction() as session:
            detail = queries.task_detail(session, task_id) or {}
        r.outcome = detail.get("task", {}).get("status") or DRILL_ERROR
        r.attempts_after = [{k: a[k] for k in ("attempt_no", "submit_state", "provider_job_id")}
                            for a in detail.get("attempts", [])]
        r.provider_jobs = provider_jobs(self.settings, task_id)
        r.ledger = {k: float(v) for k, v in ledger_sums(self.settings, task_id).items()}

    async def _invariants(self, r: DrillResult, task_id: str) -> None:
        """The shared checker over the drill's import, while its clean worker still serves the queue
        (the gate answers); nothing writes any more, so no orphan window is needed."""
        from control.invariants import check_invariants
        from schema.invariants import LEDGER_RULES

        report = await check_invariants(self.settings.model_copy(update={"task_queue": self.queue}),
                                        import_id=self.import_id, provider_jobs={task_id: r.provider_jobs or 0},
                                        orphan_safety_s=0)
        r.invariants = report.violated()
        r.invariants_unchecked = [f"{x.rule}: {x.detail}" for x in report.rules if not x.checked]
        r.ledger_violations = [f"{v.rule}: {v.detail}" for v in report.ledger_violations]
        r.ledger_balanced = r.ledger.get("RESERVE", 0) > 0 and not (LEDGER_RULES & set(r.invariants))


# -- checks, usable on their own --------------------------------------------------------------


def provider_jobs(settings: Settings, task_id: str) -> int:
    """Jobs the emulator ever created for this task (request keys are `{task}-a{n}`)."""
    response = httpx.get(f"{settings.emulator_url.rstrip('/')}/_sim/jobs", timeout=10)
    response.raise_for_status()
    return sum(str(j.get("request_key", "")).startswith(task_id) for j in response.json()["jobs"])


def ledger_sums(settings: Settings, task_id: str) -> dict[str, Decimal]:
    from schema.db import Database
    from schema.models import CreditEntry

    with Database(settings.database_url).transaction() as session:
        rows = session.execute(
            select(CreditEntry.entry_type, func.sum(CreditEntry.amount))
            .where(CreditEntry.task_id == task_id).group_by(CreditEntry.entry_type)
        ).all()
    return {kind: Decimal(total) for kind, total in rows}


def ledger_violations(settings: Settings, import_id: str | None) -> list[str] | None:
    """What `schema.ledger_check` finds wrong with the import's ledger (None if that module is absent)."""
    try:
        from schema import ledger_check
    except ImportError:
        return None
    from schema.db import Database

    with Database(settings.database_url).transaction() as session:
        findings = ledger_check.check(session, import_id)
    return [f"{v.rule}: {v.detail}" for v in findings.violations]


# -- worker processes -------------------------------------------------------------------------


def worker_env(settings: Settings, home: Path, queue: str, extra: dict[str, str]) -> dict[str, str]:
    """Our environment without failpoints, every setting spelled out, its own home, its own queue."""
    env = {k: v for k, v in os.environ.items() if k != FAILPOINTS_ENV}
    for name, value in settings.model_dump(mode="json").items():
        if name != "home":
            env[f"REELQUEUE_{name.upper()}"] = value if isinstance(value, str) else json.dumps(value)
    env["REELQUEUE_HOME"] = str(home)
    env["REELQUEUE_TASK_QUEUE"] = queue
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def start_worker(settings: Settings, folder: Path, role: str, queue: str, extra_env: dict[str, str],
                 queues: str | None = None) -> subprocess.Popen[bytes]:
    """`python worker.py [--queues ...]` on `queue`, with its own home `folder/role` and its log in
    `folder/{role}-worker.log`, in a session of its own (its ffmpeg children go with it)."""
    home = folder / role
    (home / "run").mkdir(parents=True, exist_ok=True)
    log = folder / f"{role}-worker.log"
    env = worker_env(settings, home, queue, extra_env)
    with private_log(log) as out:
        out.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} {role} worker, queue {queue}, "
                  f"queues {queues or 'default'}, {FAILPOINTS_ENV}={extra_env.get(FAILPOINTS_ENV, '')}\n".encode())
        out.flush()
        args = ["--queues", queues] if queues else []
        return subprocess.Popen([sys.executable, str(REPO_ROOT / "worker.py"), *args],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=env,
                                start_new_session=True)


async def wait_worker_ready(proc: subprocess.Popen[bytes], folder: Path, role: str) -> None:
    """Until the worker started by `start_worker(..., folder, role, ...)` polls its queues."""
    ready = folder / role / "run" / "worker.ready"
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not ready.exists():
        if proc.poll() is not None:
            raise DrillError(f"the {role} worker exited ({_exit_text(proc.returncode)}) before serving; "
                             f"see {folder / f'{role}-worker.log'}")
        if time.monotonic() > deadline:
            raise DrillError(f"the {role} worker did not serve within {READY_TIMEOUT_S:.0f}s")
        await asyncio.sleep(0.1)


async def wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> int | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            return code
        await asyncio.sleep(0.1)
    return proc.poll()


def _exit_text(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return signal.Signals(-code).name
        return f"signal {-code}"
    return f"exit {code}"


async def _stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    try:
        await asyncio.gather(*(asyncio.to_thread(stop_worker, p) for p in procs))
    finally:  # cancelled meanwhile: stop them here, synchronously (returns at once for a stopped one)
        for proc in procs:
            stop_worker(proc)


def stop_worker(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (the worker drains and exits), SIGKILL after STOP_TIMEOUT_S; then sweep its group."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(5)
    # start_new_session made the pid a group id: ffmpeg children of a killed worker go too.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


__all__ = [
    "POINTS",
    "DrillError",
    "DrillResult",
    "evidence_text",
    "preflight",
    "provider_jobs",
    "run_drills",
    "start_worker",
    "stop_worker",
    "wait_exit",
    "wait_worker_ready",
]
