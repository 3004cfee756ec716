"""Many GenerationWorkflows behind one real provider gate: fakes under the real activity names that
keep each task's facts apart (status through the real state machine, ledger, provider jobs).

A fake provider job runs `job_s` from its submit (the time-skipping server's clock, read from the
activity's scheduled time) and then succeeds; the workflow finds out by its status calls. While
`failing` is set every submit fails so (a 5xx refusal, a timeout whose reconcile finds no job, or one
whose job was made), on every provider or (`failing_on`) on one. With `routes` each task may change route
(route-fallback-v1): choose_route applies the real choice to the real gates' breakers.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from google.protobuf.empty_pb2 import Empty
from server_clock import terminate_between_tasks
from temporalio import activity
from temporalio.client import WorkflowHandle
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from workflow_fakes import ask_gate, media_worker

from config.defaults import BreakerPolicy
from contracts import workflow_api as api
from contracts.admission import AdmissionInput, BreakerMode, GateSnapshot, PriorityClass, SlotGrant
from contracts.messages import (
    AssetRef,
    AttemptRef,
    GenerationInput,
    JobRef,
    LedgerResult,
    MediaStepInput,
    MediaStepResult,
    PollResult,
    PrepareResult,
    ReconcileOutcome,
    ReconcileResult,
    RenditionsResult,
    RouteFields,
    RouteRequest,
    RouteTaken,
    SettleInput,
    StrayJobRef,
    SubmitActivityResult,
    TaskInfo,
    TaskRef,
    TranscodeInput,
    TransitionInput,
    TransitionResult,
    ValidationResult,
)
from contracts.provider import ErrorClass, JobStatus, SubmitOutcome
from contracts.routing import Route, RouteFacts, choose_route
from contracts.task import TaskStatus
from schema import state_machine as sm
from workflows.generation import GenerationWorkflow
from workflows.provider_gate import ProviderGateWorkflow

PROVIDER = "fake"
RESERVED = Decimal("4")
JOB_COST = Decimal("3")


@dataclass
class Job:
    task_id: str
    submitted_at: datetime
    cancelled: bool = False


def peak(jobs: list[Job], job_s: float) -> int:
    """The most of `jobs` alive at the provider at once (each lives `job_s` from its submit)."""
    alive = timedelta(seconds=job_s)
    return max((sum(1 for j in jobs if j.submitted_at <= k.submitted_at < j.submitted_at + alive) for k in jobs),
               default=0)


@dataclass
class Fleet:
    """The facts of every task, and how the fake provider behaves."""

    limit: int = 5
    job_s: float = 180.0
    deadline_s: float = 3600.0  # [deadlines] job_minutes, 60 by default
    task_deadline_s: float = 86_400.0  # [deadlines] task_hours, 24 by default
    webhooks: bool = True  # polling as a safety net: few status calls per job
    tenants: dict[str, str] = field(default_factory=dict)  # task -> its tenant ("default" when absent)
    tenant_limit: int | None = None  # every tenant's max_concurrent (None: no tenant layer)
    platform_limit: int | None = None  # REELQUEUE_PLATFORM_MAX_CONCURRENT (None: no platform layer)
    models: dict[str, str] = field(default_factory=dict)  # task -> its model ("m" when absent)
    model_limits: dict[str, int] = field(default_factory=dict)  # model -> its limit (absent: no model layer)
    priorities: dict[str, PriorityClass] = field(default_factory=dict)  # task -> its class (absent: none)
    client: Any = None
    status: dict[str, TaskStatus] = field(default_factory=lambda: defaultdict(lambda: TaskStatus.CREATED))
    validated_at: dict[str, datetime] = field(default_factory=dict)  # server time (local activities see wall time)
    settled_at: dict[str, datetime] = field(default_factory=dict)  # the ledger closed: the task is ending
    ledger: dict[str, dict[str, Decimal]] = field(default_factory=lambda: defaultdict(dict))
    jobs: dict[str, Job] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # request_slot runs per task
    asked: set[str] = field(default_factory=set)  # the gates (providers) asked for a slot
    asked_at: dict[str, datetime] = field(default_factory=dict)  # task -> its first ask at the provider's gate
    # "http_503": submits refused with a 5xx; "timeout": sent, no answer, no job; "timeout_created": no answer,
    # the job made
    failing: str | None = None
    failing_on: str | None = None  # the provider whose submits fail (None: every provider)
    routes: list[Route] = field(default_factory=list)  # every task's template routes (the primary: fake/m)
    lock_model: bool = False
    route: dict[str, Route] = field(default_factory=dict)  # task -> the route it took last (absent: the primary)
    sent_on: list[tuple[str, datetime, str]] = field(default_factory=list)  # (task, when, provider) of each submit
    # (task, provider, the gate the slot it was sent under came from, that provider's breaker then) of each submit
    sent_under: list[tuple[str, str, str | None, BreakerMode]] = field(default_factory=list)
    routed: list[tuple[str, datetime, bool]] = field(default_factory=list)  # (task, when, take) of choose_route
    breaker: BreakerPolicy | None = None  # the provider gate's breaker policy (None: the defaults)
    # a look reuses a gate's snapshot this many wall seconds (0: it queries the gate every time); bench/
    # long_wait_bench.py's thousand waiting tasks would otherwise query each gate a thousand times at once
    snapshot_reuse_s: float = 0.0
    snapshots: dict[str, tuple[float, GateSnapshot]] = field(default_factory=dict)
    submits: list[tuple[str, datetime, str]] = field(default_factory=list)  # (task, when, "accepted" or failure)
    reconciled: list[tuple[str, datetime]] = field(default_factory=list)  # (task, when)
    followed: list[tuple[str, str, datetime]] = field(default_factory=list)  # ("poll_job" or "cancel_job", job, when)
    seen: dict[str, TransitionResult] = field(default_factory=dict)

    def cancelled(self) -> list[str]:
        return [job_id for job_id, j in self.jobs.items() if j.cancelled]

    def jobs_of(self, task_id: str) -> int:
        return sum(j.task_id == task_id for j in self.jobs.values())

    def balanced(self, task_id: str) -> bool:
        rows = self.ledger[task_id]
        return rows.get("RESERVE", 0) == rows.get("SETTLE", 0) + rows.get("RELEASE", 0)

    def route_of(self, task_id: str) -> Route:
        return self.route.get(task_id, Route(provider=PROVIDER, model=self.models.get(task_id, "m")))

    def activities(self) -> list[Callable[..., Any]]:
        fleet = self

        def now() -> datetime:
            return activity.info().scheduled_time

        async def when() -> datetime:
            """When this step runs on the server's clock (a local activity's scheduled time is the worker's)."""
            if not activity.info().is_local:
                return now()
            answer = await fleet.client.test_service.get_current_time(Empty())
            return answer.time.ToDatetime().replace(tzinfo=UTC)

        def transition(req: TransitionInput) -> TransitionResult:
            if req.source_event_id in fleet.seen:  # idempotent per source event, as in Postgres
                return fleet.seen[req.source_event_id]
            to = sm.target(fleet.status[req.task_id], req.event)
            if to is not None:
                fleet.status[req.task_id] = to
            result = TransitionResult(applied=to is not None, status=fleet.status[req.task_id], version=0)
            fleet.seen[req.source_event_id] = result
            return result

        def settled(req: SettleInput) -> LedgerResult:
            rows = fleet.ledger[req.task_id]
            fleet.settled_at.setdefault(req.task_id, now())
            if "SETTLE" not in rows and "RELEASE" not in rows:
                cost = min(Decimal(str(req.cost)), rows["RESERVE"])
                rows["SETTLE"], rows["RELEASE"] = cost, rows["RESERVE"] - cost
            return LedgerResult(reserved=float(rows["RESERVE"]), settled=float(rows["SETTLE"]),
                                released=float(rows["RELEASE"]))

        @activity.defn(name="record_transition")
        async def record_transition(req: TransitionInput) -> TransitionResult:
            return transition(req)

        @activity.defn(name="validate_task")
        async def validate_task(ref: TaskRef) -> ValidationResult:
            return validated(ref)

        @activity.defn(name="prepare_task")
        async def prepare_task(ref: TaskRef) -> PrepareResult:
            """lean-path-v1: validated, the estimate held, the three moves to QUEUED."""
            checked = validated(ref)
            fleet.ledger[ref.task_id].setdefault("RESERVE", RESERVED)
            return PrepareResult(**checked.model_dump(), moved=[transition(m) for m in ref.moves],
                                 task_deadline_at=now() + timedelta(seconds=fleet.task_deadline_s))

        @activity.defn(name="make_media")
        async def make_media(req: MediaStepInput) -> MediaStepResult:
            """lean-path-v1: the proxy, no renditions, and the close when asked (one job per task: no strays)."""
            closed = None
            if req.close is not None:
                closed = settled(req.close).model_copy(update={"moved": [transition(m) for m in req.close.moves]})
            return MediaStepResult(proxy=AssetRef(asset_id=f"p-{req.task_id}", kind="PROXY",
                                                  key=f"proxy/{req.task_id}.mp4", sha256="1" * 64, size=5),
                                   renditions={}, closed=closed)

        def validated(ref: TaskRef) -> ValidationResult:
            fleet.validated_at.setdefault(ref.task_id, now())
            info = TaskInfo(task_id=ref.task_id, tenant_id=fleet.tenants.get(ref.task_id, "default"),
                            status=fleet.status[ref.task_id].value, provider=PROVIDER,
                            model=fleet.models.get(ref.task_id, "m"),
                            aspect_ratio="9:16", duration_s=2.0, estimated_cost=float(RESERVED),
                            min_poll_interval_s=1.0, deadline_s=fleet.deadline_s,
                            task_deadline_s=fleet.task_deadline_s, current_attempt_no=0,
                            tenant_max_concurrent=fleet.tenant_limit, platform_max_concurrent=fleet.platform_limit,
                            model_max_concurrent=fleet.model_limits.get(fleet.models.get(ref.task_id, "m")),
                            priority=fleet.priorities.get(ref.task_id), routes=fleet.routes,
                            lock_model=fleet.lock_model)
            return ValidationResult(ok=True, info=info)

        @activity.defn(name="reserve_credit")
        async def reserve_credit(ref: TaskRef) -> LedgerResult:
            fleet.ledger[ref.task_id].setdefault("RESERVE", RESERVED)
            return LedgerResult(reserved=float(RESERVED), settled=0, released=0)

        @activity.defn(name="settle")
        async def settle(req: SettleInput) -> LedgerResult:
            return settled(req)

        @activity.defn(name="request_slot")
        async def request_slot(inp: AdmissionInput) -> SlotGrant | None:
            fleet.requests[inp.request.task_id] += 1
            fleet.asked.add(inp.provider)
            if inp.provider == PROVIDER:
                fleet.asked_at.setdefault(inp.request.task_id, now())
            tenant_gate = inp.grant_signal is not None  # a layer's limit (tenant, model, platform), sent as the plan's
            return await ask_gate(fleet.client, inp, inp.plan_limits.max_concurrent if tenant_gate else fleet.limit,
                                  breaker=fleet.breaker)

        @activity.defn(name="submit")
        async def submit(ref: AttemptRef) -> SubmitActivityResult:
            provider = fleet.route_of(ref.task_id).provider
            failing = fleet.failing if fleet.failing_on in (None, provider) else None
            fleet.submits.append((ref.task_id, now(), failing or "accepted"))
            fleet.sent_on.append((ref.task_id, now(), provider))
            fleet.sent_under.append((ref.task_id, provider, ref.gate_id, (await breaker(provider)).breaker))
            job_id = f"{ref.task_id}-a{ref.attempt_no}"
            if failing in ("timeout", "timeout_created"):
                if failing == "timeout_created":
                    fleet.jobs.setdefault(job_id, Job(task_id=ref.task_id, submitted_at=now()))
                return SubmitActivityResult(outcome=SubmitOutcome.UNKNOWN, error="sent, no answer",
                                            error_class=ErrorClass.UNKNOWN_OUTCOME, failure="timeout")
            if failing:
                return SubmitActivityResult(outcome=SubmitOutcome.REJECTED_RETRYABLE, error="HTTP 503",
                                            error_class=ErrorClass.RETRYABLE, retry_after_s=1.0, failure=failing)
            fleet.jobs.setdefault(job_id, Job(task_id=ref.task_id, submitted_at=now()))
            return SubmitActivityResult(outcome=SubmitOutcome.ACCEPTED, job_id=job_id, webhooks=fleet.webhooks)

        async def breaker(provider: str) -> GateSnapshot:
            kept = fleet.snapshots.get(provider)
            if kept is not None and time.monotonic() - kept[0] < fleet.snapshot_reuse_s:
                return kept[1]
            snap = await gate_snapshot(provider)
            fleet.snapshots[provider] = (time.monotonic(), snap)
            return snap

        async def gate_snapshot(provider: str) -> GateSnapshot:
            try:
                return await fleet.client.get_workflow_handle(api.gate_id(provider, activity.info().task_queue)).query(
                    api.QUERY_GATE_SNAPSHOT, result_type=GateSnapshot)
            except RPCError:  # no gate yet: closed
                return GateSnapshot(limit=0, effective=0, in_use=0, waiting=0, oldest_wait_s=0, granted=0,
                                    throttles=0)

        @activity.defn(name="choose_route")
        async def choose_route_(req: RouteRequest) -> RouteTaken:
            fleet.routed.append((req.task_id, await when(), req.take))
            gates = {r.provider: await breaker(r.provider) for r in fleet.routes}
            facts = [RouteFacts(route=r, breaker=gates[r.provider].breaker, price=float(RESERVED),
                                probe_free=not gates[r.provider].breaker_probe_out) for r in fleet.routes]
            # As the real step: the route the task holds is its row's, pinned while a job of it may be alive.
            alive = any(not state(job_id).terminal for job_id, job in fleet.jobs.items() if job.task_id == req.task_id)
            choice = choose_route(facts, reserved=float(RESERVED), spendable=0.0, lock_model=fleet.lock_model,
                                  current=fleet.route_of(req.task_id), job_may_exist=req.job_may_exist or alive)
            if req.take:
                fleet.route[req.task_id] = choice.route
            return RouteTaken(choice=choice, fields=RouteFields(
                provider=choice.route.provider, model=choice.route.model, min_poll_interval_s=1.0))

        def state(job_id: str) -> PollResult:
            job = fleet.jobs[job_id]
            if job.cancelled:
                return PollResult(status=JobStatus.CANCELED, raw_status="canceled", cost=0.0)
            if now() - job.submitted_at >= timedelta(seconds=fleet.job_s):
                return PollResult(status=JobStatus.SUCCEEDED, raw_status="succeeded", cost=float(JOB_COST))
            return PollResult(status=JobStatus.RUNNING, raw_status="running")

        @activity.defn(name="poll_job")
        async def poll_job(ref: JobRef) -> PollResult:
            fleet.followed.append(("poll_job", ref.job_id, now()))
            polled = state(ref.job_id)
            if polled.terminal and ref.release and ref.gate_id:  # release-in-step-v1: the step gives the slot back
                await fleet.client.get_workflow_handle(ref.gate_id).signal(api.SIGNAL_GATE_RELEASE, ref.release)
                return polled.model_copy(update={"released": True})
            return polled

        @activity.defn(name="reconcile_submit")
        async def reconcile_submit(ref: AttemptRef) -> ReconcileResult:
            fleet.reconciled.append((ref.task_id, now()))
            job_id = f"{ref.task_id}-a{ref.attempt_no}"
            if job_id in fleet.jobs:
                return ReconcileResult(outcome=ReconcileOutcome.FOUND, job_id=job_id)
            return ReconcileResult(outcome=ReconcileOutcome.ABSENT, evidence=f"no job for {job_id}")

        @activity.defn(name="cancel_job")
        async def cancel_job(ref: JobRef) -> PollResult:
            fleet.followed.append(("cancel_job", ref.job_id, now()))
            if not state(ref.job_id).terminal:
                fleet.jobs[ref.job_id].cancelled = True
            return state(ref.job_id)

        @activity.defn(name="fetch_output")
        async def fetch_output(ref: JobRef) -> AssetRef:
            return AssetRef(asset_id=f"raw-{ref.job_id}", kind="RAW_OUTPUT", key=f"raw/{ref.job_id}.mp4",
                            sha256="0" * 64, size=10)

        @activity.defn(name="transcode_proxy")
        async def transcode_proxy(req: TranscodeInput) -> AssetRef:
            return AssetRef(asset_id=f"p-{req.task_id}", kind="PROXY", key=f"proxy/{req.task_id}.mp4",
                            sha256="1" * 64, size=5)

        @activity.defn(name="unaccounted_strays")
        async def unaccounted_strays(ref: TaskRef) -> list[StrayJobRef]:
            return []  # one job per task: no duplicates

        @activity.defn(name="make_renditions")
        async def make_renditions(req: TranscodeInput) -> RenditionsResult:
            return RenditionsResult(renditions=[])

        return [record_transition, validate_task, reserve_credit, prepare_task, settle, request_slot, submit, poll_job,
                reconcile_submit, cancel_job, fetch_output, transcode_proxy, make_renditions, make_media,
                unaccounted_strays, choose_route_]


@dataclass
class FleetRun:
    """A fleet's worker is up: start tasks on its queue; `gate` is the provider's gate there."""

    env: WorkflowEnvironment
    queue: str
    handles: list[WorkflowHandle] = field(default_factory=list)

    @property
    def gate(self) -> WorkflowHandle:
        return self.env.client.get_workflow_handle(api.gate_id(PROVIDER, self.queue))

    async def start(self, task_id: str) -> WorkflowHandle:
        handle = await self.env.client.start_workflow(
            GenerationWorkflow.run, GenerationInput(task_id=task_id), id=f"gen-{task_id}-{uuid.uuid4().hex[:8]}",
            task_queue=self.queue)
        self.handles.append(handle)
        return handle


@contextlib.asynccontextmanager
async def running_fleet(env: WorkflowEnvironment, fleet: Fleet) -> AsyncIterator[FleetRun]:
    """A worker for the fleet on a queue of its own. Whatever still runs afterwards (tasks, the
    gate) is terminated, between its tasks (tests/workflow/server_clock.py says why)."""
    run = FleetRun(env=env, queue=f"fleet-{uuid.uuid4().hex[:10]}")
    fleet.client = env.client
    async with Worker(env.client, task_queue=run.queue, workflows=[GenerationWorkflow, ProviderGateWorkflow],
                      activities=fleet.activities(), workflow_runner=SandboxedWorkflowRunner(),
                      max_concurrent_activities=200, max_concurrent_local_activities=200), \
            media_worker(env.client, run.queue, fleet.activities()):
        yield run
        await terminate_between_tasks(env, [*run.handles, run.gate])
