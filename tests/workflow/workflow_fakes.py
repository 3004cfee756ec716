"""An in-memory world for GenerationWorkflow tests: fake activities under the real names.

The fakes keep the facts the real activities keep (task status through the real state machine,
attempts, ledger rows, provider jobs) so a test can assert what a path leaves behind. A test
scripts the provider (what submit, poll, cancel and reconcile answer) and may hold any activity at
a gate to send a signal or a Temporal cancel while that step is in flight.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from server_clock import skip
from temporalio import activity
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.worker import Worker

from activities import admission
from activities.errors import DEPENDENCY_UNAVAILABLE, DISPATCH_NOT_CLAIMED, INSUFFICIENT_CREDIT, PROVIDER_REFUSED
from config.defaults import BreakerPolicy
from contracts import workflow_api as api
from contracts.admission import (
    AdmissionInput,
    BreakerMode,
    GateInput,
    PlanLimits,
    SlotGrant,
    SlotRelease,
    SlotRenewal,
)
from contracts.messages import (
    AssetRef,
    AttemptRef,
    CheckInput,
    CheckOutcome,
    CheckResult,
    FetchedAsset,
    JobRef,
    LedgerResult,
    MediaStepInput,
    MediaStepResult,
    PollResult,
    PrepareResult,
    ProviderUpdate,
    ReconcileResult,
    RenditionOut,
    RenditionProfile,
    RenditionsResult,
    RenditionStatus,
    ResolveAction,
    ResolveRequest,
    ResolveResult,
    ReviewPolicy,
    RouteFields,
    RouteRequest,
    RouteTaken,
    SettleInput,
    StrayCostAcceptance,
    StrayJobRef,
    StrayJobResult,
    SubmitActivityResult,
    TaskInfo,
    TaskRef,
    TranscodeInput,
    TranscodeResult,
    TransitionInput,
    TransitionResult,
    ValidationResult,
)
from contracts.provider import ErrorClass, JobStatus, SubmitOutcome
from contracts.routing import Route, RouteFacts, choose_route
from contracts.task import TaskStatus
from schema import state_machine as sm

TASK_ID = "t1"
RESERVED = Decimal("4")
JOB_COST = 3.0
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)

# What a scripted answer may be: a value to return, an exception to raise, or a callable.
Answer = Any


def accepted(job_id: str, *, webhooks: bool = False, early: tuple[ProviderUpdate, ...] = ()) -> SubmitActivityResult:
    """The provider took the submit; with `webhooks` it will also send webhooks, `early` arrived
    before the submit's answer (orphans matched once the job id was saved)."""
    return SubmitActivityResult(outcome=SubmitOutcome.ACCEPTED, job_id=job_id, webhooks=webhooks,
                                early_updates=list(early))


def webhook(status: JobStatus | None, event_id: str, *, at_s: float = 0.0, verified: bool = True,
            job_id: str = "job-1") -> ProviderUpdate:
    """A webhook observation as the gateway signals it; `at_s` orders the provider's timestamps."""
    return ProviderUpdate(job_id=job_id, status=status, raw_status=status.value if status else None,
                          event_id=event_id, observed_at=EPOCH + timedelta(seconds=at_s), verified=verified)


def unknown() -> SubmitActivityResult:
    return SubmitActivityResult(outcome=SubmitOutcome.UNKNOWN, error="sent, no answer",
                                error_class=ErrorClass.UNKNOWN_OUTCOME)


def refused(retry_after_s: float | None = 1.0) -> SubmitActivityResult:
    return SubmitActivityResult(outcome=SubmitOutcome.REJECTED_RETRYABLE, error="429 RATE_LIMIT.QUEUE_FULL",
                                error_class=ErrorClass.RETRYABLE, retry_after_s=retry_after_s)


def job(status: JobStatus, *, cost: float | None = None, error_class: ErrorClass | None = None,
        error: str | None = None) -> PollResult:
    if cost is None and status in (JobStatus.SUCCEEDED,):
        cost = JOB_COST
    return PollResult(status=status, raw_status=status.value, cost=cost, error_class=error_class, error=error)


RUNNING = job(JobStatus.RUNNING)
SUCCEEDED = job(JobStatus.SUCCEEDED)
CANCELED = job(JobStatus.CANCELED, cost=0.0)


CHECKS_PASSED = CheckResult(passed=True, checks=[CheckOutcome(name="black", passed=True, detail="0.00 s black")])
CHECKS_BLACK = CheckResult(passed=False, checks=[CheckOutcome(name="black", passed=False, detail="2.00 s black")])


def review_policy(*, required: bool = True, on_deadline: str = "expire", deadline_s: float = 3600.0) -> ReviewPolicy:
    return ReviewPolicy(required=required, deadline_s=deadline_s, on_deadline=on_deadline, duration_tolerance_s=0.5,
                        audio_expected=True, max_black_ratio=0.3, max_frozen_ratio=0.5)


def checks_policy(*, on_failed_checks: str = "review") -> ReviewPolicy:
    """What validate_task reads for a template without review: its checks gate success."""
    return review_policy(required=False).model_copy(update={"audio_expected": False,
                                                            "on_failed_checks": on_failed_checks})


def outage(message: str = "503 from the provider") -> RuntimeError:
    """An infrastructure failure: retried by the step's policy."""
    return RuntimeError(message)


def unavailable(message: str = "the database is unreachable") -> ApplicationError:
    """Postgres or object storage out of reach, as activities/errors.py reports it: retried."""
    return ApplicationError(message, type=DEPENDENCY_UNAVAILABLE)


def refusal(message: str = "404 no such job") -> ApplicationError:
    return ApplicationError(message, type=PROVIDER_REFUSED, non_retryable=True)


@dataclass
class World:
    """The facts a run leaves behind, and the script the fake provider follows."""

    status: TaskStatus = TaskStatus.CREATED
    version: int = 0
    past: sm.Past = field(default_factory=sm.Past)  # what the guarded rows ask, as Postgres folds it
    valid: bool | BaseException = True  # an exception: validate_task raises it
    credit: bool = True
    reserves: list[Answer] = field(default_factory=list)  # reserve_credit: scripted failures, else reserved
    deadline_s: float = 3600.0
    task_deadline_s: float = 86_400.0
    submits: list[Answer] = field(default_factory=lambda: [accepted("job-1")])
    polls: list[Answer] = field(default_factory=lambda: [RUNNING, SUCCEEDED])
    reconciles: list[Answer] = field(default_factory=list)
    cancels: list[Answer] = field(default_factory=lambda: [CANCELED])
    fetches: list[Answer] = field(default_factory=list)
    proxies: list[Answer] = field(default_factory=list)  # transcode_proxy: scripted failures, else a proxy
    renditions: list[Answer] = field(default_factory=list)  # make_renditions: scripted answers, else all READY
    events: list[tuple[str, str, bool]] = field(default_factory=list)  # (event, to status, applied)
    calls: list[tuple[str, Any]] = field(default_factory=list)
    called_at: list[tuple[str, datetime]] = field(default_factory=list)  # when each activity was scheduled
    queues: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # activity -> task queues it ran on
    ledger: list[tuple[str, Decimal, str]] = field(default_factory=list)
    gates: dict[str, asyncio.Event] = field(default_factory=dict)
    entered: dict[str, asyncio.Event] = field(default_factory=lambda: defaultdict(asyncio.Event))
    abandoned: list[int] = field(default_factory=list)
    seen: dict[str, TransitionResult] = field(default_factory=dict)
    client: Any = None  # the test environment's client: the real provider gate runs beside the fakes
    limit: int = 20
    plan_limits: PlanLimits | None = None  # what validate_task reads from the task's plan
    review: ReviewPolicy | None = None  # what validate_task reads from the task's template
    checks_policy: ReviewPolicy | None = None  # likewise, the checks of a template without review
    paused_by: str | None = None  # what validate_task reads from the task's import (import-pause-v1)
    ask_answers_lost: int = 0  # request_slot: this many asks the gate admitted, their answer lost (then a signal)
    tenant_limit: int | None = None  # the tenant's max_concurrent (tenant-admission-v1); None: no tenant layer
    platform_limit: int | None = None  # the platform's total (admission-layers-v1); None: no platform layer
    checks: list[Answer] = field(default_factory=lambda: [CHECKS_PASSED])
    transitions: list[TransitionInput] = field(default_factory=list)  # every applied move, as sent
    strays: list[StrayJobRef] = field(default_factory=list)  # stray_jobs rows not accounted yet
    stray_answers: list[Answer] = field(default_factory=lambda: [StrayJobResult(status=JobStatus.CANCELED, cost=1.0)])
    # False: the activities ignore the moves a request carries, as workers from before transition-in-work-v2
    # (submit then refuses a task that is not DISPATCHING, as its transaction A did)
    carries: bool = True
    renewed: list[SlotRenewal] = field(default_factory=list)  # renewals the submit step sent the gate
    released: list[SlotRelease] = field(default_factory=list)  # releases the poll step sent the gate
    # route-fallback-v1: the template's routes (the primary is fake/m) and its lock; choose_route applies the
    # real choice (contracts.routing) to `breakers`, each provider's breaker as the test sets it (else closed)
    routes: list[Route] = field(default_factory=list)
    lock_model: bool = False
    breakers: dict[str, BreakerMode] = field(default_factory=dict)
    route: Route | None = None  # the route the task's row holds (None: the primary), as choose_route takes it

    # -- script helpers ---------------------------------------------------------------------

    def hold(self, name: str) -> None:
        """Make activity `name` wait at its gate until `release(name)`."""
        self.gates[name] = asyncio.Event()

    def release(self, name: str) -> None:
        self.gates.pop(name).set()

    def called(self, name: str) -> list[Any]:
        return [arg for n, arg in self.calls if n == name]

    def checked(self) -> list[CheckInput]:
        """The checks asked for, by check_output or (lean-path-v1) of the media step."""
        return [arg if name == "check_output" else CheckInput(
                    task_id=arg.task_id, attempt_no=arg.attempt_no, proxy_asset_id="p", **arg.checks.model_dump())
                for name, arg in self.calls
                if name == "check_output" or (name == "make_media" and arg.checks is not None)]

    def times(self, name: str) -> list[datetime]:
        return [at for n, at in self.called_at if n == name]

    def moves(self) -> list[str]:
        return [to for _, to, applied in self.events if applied]

    def sums(self) -> dict[str, Decimal]:
        out: dict[str, Decimal] = defaultdict(Decimal)
        for kind, amount, _ in self.ledger:
            out[kind] += amount
        return dict(out)

    def balanced(self) -> bool:
        s = self.sums()
        return s.get("RESERVE", 0) == s.get("SETTLE", 0) + s.get("RELEASE", 0)

    def held(self) -> Decimal:
        s = self.sums()
        return s.get("RESERVE", 0) - s.get("SETTLE", 0) - s.get("RELEASE", 0)

    # -- the fake activities ----------------------------------------------------------------

    async def _enter(self, name: str, arg: Any) -> None:
        self.calls.append((name, arg))
        self.called_at.append((name, activity.info().scheduled_time))
        self.queues[name].add(activity.info().task_queue)
        self.entered[name].set()
        if name in self.gates:
            await self.gates[name].wait()

    async def _answer(self, name: str, arg: Any, script: list[Answer]) -> Any:
        """A scripted activity: record the call, wait at its gate, give the next scripted answer."""
        await self._enter(name, arg)
        return self._next(script, name)

    @staticmethod
    def _next(script: list[Answer], name: str) -> Any:
        if not script:
            raise AssertionError(f"the test scripted no more answers for {name}")
        answer = script.pop(0) if len(script) > 1 else script[0]
        if callable(answer) and not isinstance(answer, type):
            answer = answer()
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def _book_stray(self, ref: StrayJobRef, cost: Decimal) -> None:
        """Accounted: an ADJUSTMENT with its job id (once), and no longer an open stray."""
        key = f"adjustment:job:{ref.job_id}"
        if not any(k == key for _, _, k in self.ledger):
            self.ledger.append(("ADJUSTMENT", cost, key))
        self.strays = [s for s in self.strays if s.job_id != ref.job_id]

    def transition(self, req: TransitionInput) -> TransitionResult:
        """One move through the real state machine, idempotent per source event as in Postgres."""
        if req.source_event_id in self.seen:
            return self.seen[req.source_event_id]
        to = sm.target(self.status, req.event)
        if sm.refusal(self.status, req.event, self.past) is not None:
            to = None
        self.events.append((req.event.value, (to or self.status).value, to is not None))
        if to is not None:
            self.past = self.past.after(req.event, self.status, to)
            self.status, self.version = to, self.version + 1
            self.transitions.append(req)
        result = TransitionResult(applied=to is not None, status=self.status, version=self.version)
        self.seen[req.source_event_id] = result
        return result

    def carried(self, moves: list[TransitionInput], *, always: bool = False) -> list[TransitionResult]:
        """The moves an activity commits with its own write (transition-in-work-v1): in order, up to
        the first the table refuses. `always`: a step that has carried its moves since it exists
        (lean-path-v1's), whatever `carries` says of the older ones."""
        done: list[TransitionResult] = []
        for req in moves if self.carries or always else []:
            done.append(self.transition(req))
            if not done[-1].applied:
                break
        return done

    def settle(self, req: SettleInput) -> LedgerResult:
        """What settle writes: the ledger rows that close the task's reservation (once)."""
        if req.after_review:
            if req.cost:
                self.ledger.append(("ADJUSTMENT", Decimal(str(req.cost)), f"adjustment:review:{req.attempt_no}"))
            return LedgerResult(reserved=0, settled=0, released=0)
        if any(k in ("settle", "release") for _, _, k in self.ledger):
            return LedgerResult(reserved=0, settled=0, released=0)
        reserved = self.sums().get("RESERVE", Decimal(0))
        cost = Decimal(str(req.cost))
        settled = min(cost, reserved)
        if settled:
            self.ledger.append(("SETTLE", settled, "settle"))
        if reserved - settled:
            self.ledger.append(("RELEASE", reserved - settled, "release"))
        if cost > reserved:
            self.ledger.append(("ADJUSTMENT", cost - reserved, f"adjustment:{req.attempt_no}"))
        return LedgerResult(reserved=float(reserved), settled=float(settled), released=float(reserved - settled))

    def activities(self) -> list[Callable[..., Any]]:
        world = self

        @activity.defn(name="record_transition")
        async def record_transition(req: TransitionInput) -> TransitionResult:
            return world.transition(req)

        def task_info(ref: TaskRef) -> TaskInfo:
            return TaskInfo(task_id=ref.task_id, tenant_id="default", status=world.status.value, provider="fake",
                            model="m", aspect_ratio="9:16", duration_s=2.0, estimated_cost=float(RESERVED),
                            min_poll_interval_s=1.0, deadline_s=world.deadline_s, current_attempt_no=0,
                            task_deadline_s=world.task_deadline_s,
                            plan_limits=world.plan_limits, review=world.review, checks=world.checks_policy,
                            paused_by=world.paused_by, routes=world.routes, lock_model=world.lock_model,
                            tenant_max_concurrent=world.tenant_limit, platform_max_concurrent=world.platform_limit)

        def validated(ref: TaskRef) -> ValidationResult:
            if isinstance(world.valid, BaseException):
                raise world.valid
            return ValidationResult(ok=world.valid, reason=None if world.valid else "empty prompt", info=task_info(ref))

        def hold(ref: TaskRef, *, scripted: bool = True) -> bool:
            """reserve_credit's hold: False without credit; a scripted failure raises."""
            if scripted and world.reserves:
                world._next(world.reserves, "reserve_credit")
            if not world.credit:
                return False
            key = "reserve" if ref.hold_for_attempt is None else f"reserve:a{ref.hold_for_attempt}"
            if not any(k == key for _, _, k in world.ledger):
                world.ledger.append(("RESERVE", RESERVED, key))
            return True

        @activity.defn(name="validate_task")
        async def validate_task(ref: TaskRef) -> ValidationResult:
            await world._enter("validate_task", ref)
            return validated(ref)

        @activity.defn(name="reserve_credit")
        async def reserve_credit(ref: TaskRef) -> LedgerResult:
            await world._enter("reserve_credit", ref)
            if not hold(ref):
                raise ApplicationError("tenant has 0 credits", type=INSUFFICIENT_CREDIT, non_retryable=True)
            return LedgerResult(reserved=float(RESERVED), settled=0, released=0, moved=world.carried(ref.moves))

        @activity.defn(name="prepare_task")
        async def prepare_task(ref: TaskRef) -> PrepareResult:
            """lean-path-v1: validate_task, then (valid) reserve_credit's hold, VALIDATION_PASSED and QUEUED."""
            await world._enter("prepare_task", ref)
            checked = validated(ref)
            started, passed, queued = ref.moves
            if checked.ok and world.reserves:  # a scripted failure of the step's transaction: nothing is kept
                world._next(world.reserves, "reserve_credit")
            moved = world.carried([started], always=True)
            short, deadline = None, None
            if checked.ok and moved and (moved[0].applied or moved[0].status is TaskStatus.VALIDATING):
                if not hold(ref, scripted=False):
                    short = "tenant has 0 credits"
                else:
                    deadline = activity.info().scheduled_time + timedelta(seconds=world.task_deadline_s)
                    moved += world.carried([passed, queued.model_copy(update={"deadline_at": deadline})], always=True)
            return PrepareResult(**checked.model_dump(), credit_short=short, task_deadline_at=deadline, moved=moved)

        @activity.defn(name="settle")
        async def settle(req: SettleInput) -> LedgerResult:
            await world._enter("settle", req)
            balance = world.settle(req)
            return balance.model_copy(update={"moved": world.carried(req.moves)})

        @activity.defn(name="submit")
        async def submit(ref: AttemptRef) -> SubmitActivityResult:
            claimed = world.carried(ref.moves)  # transaction A, before the call
            await world._enter("submit", ref)
            if world.status is not TaskStatus.DISPATCHING:  # the state machine refused the dispatch
                raise ApplicationError(f"task is {world.status.value}, not DISPATCHING", type=DISPATCH_NOT_CLAIMED,
                                       non_retryable=True)
            sent = world._next(world.submits, "submit")
            accepted = ref.accepted if sent.outcome is SubmitOutcome.ACCEPTED else None
            done = world.carried([accepted.with_facts(job_id=sent.job_id)] if accepted else [])  # transaction B
            renewed = False
            if sent.outcome is SubmitOutcome.ACCEPTED and ref.renewal and ref.gate_id and world.carries:
                await world.client.get_workflow_handle(ref.gate_id).signal(api.SIGNAL_GATE_RENEW, ref.renewal)
                world.renewed.append(ref.renewal)
                renewed = True
            return sent.model_copy(update={"moved": claimed + done, "renewed": renewed})

        @activity.defn(name="reconcile_submit")
        async def reconcile_submit(ref: AttemptRef) -> ReconcileResult:
            return await world._answer("reconcile_submit", ref, world.reconciles)

        @activity.defn(name="abandon_attempt")
        async def abandon_attempt(ref: AttemptRef) -> bool:
            await world._enter("abandon_attempt", ref)
            world.abandoned.append(ref.attempt_no)
            return True

        @activity.defn(name="poll_job")
        async def poll_job(ref: JobRef) -> PollResult:
            polled = await world._answer("poll_job", ref, world.polls)
            offered = ref.move_on.get(polled.status)
            moved = world.carried([offered] if offered else [])
            released = False
            if polled.terminal and ref.release and ref.gate_id and world.carries:  # release-in-step-v1
                await world.client.get_workflow_handle(ref.gate_id).signal(api.SIGNAL_GATE_RELEASE, ref.release)
                world.released.append(ref.release)
                released = True
            return polled.model_copy(update={"moved": moved, "released": released})

        @activity.defn(name="cancel_job")
        async def cancel_job(ref: JobRef) -> PollResult:
            return await world._answer("cancel_job", ref, world.cancels)

        @activity.defn(name="account_stray_job")
        async def account_stray_job(ref: StrayJobRef) -> StrayJobResult:
            result = await world._answer("account_stray_job", ref, world.stray_answers)
            world._book_stray(ref, Decimal(str(result.cost)))
            return result

        @activity.defn(name="unaccounted_strays")
        async def unaccounted_strays(ref: TaskRef) -> list[StrayJobRef]:
            await world._enter("unaccounted_strays", ref)
            return list(world.strays)

        @activity.defn(name="accept_stray_cost")
        async def accept_stray_cost(decision: StrayCostAcceptance) -> float:
            await world._enter("accept_stray_cost", decision)
            world._book_stray(decision.stray, RESERVED)
            return float(RESERVED)

        @activity.defn(name="fetch_output")
        async def fetch_output(ref: JobRef) -> FetchedAsset:
            await world._enter("fetch_output", ref)
            if world.fetches:
                world._next(world.fetches, "fetch_output")
            raw = FetchedAsset(asset_id=f"raw-{ref.job_id}", kind="RAW_OUTPUT", key=f"raw/{ref.job_id}.mp4",
                               sha256="0" * 64, size=10)
            moved = world.carried([m.with_facts(raw_key=raw.key, sha256=raw.sha256) for m in ref.moves])
            return raw.model_copy(update={"moved": moved})

        @activity.defn(name="transcode")
        async def transcode(req: TranscodeInput) -> TranscodeResult:
            await world._enter("transcode", req)
            ref = AssetRef(asset_id="p", kind="PROXY", key="proxy/main.mp4", sha256="1" * 64, size=5)
            return TranscodeResult(proxy=ref, hls=ref, thumbnail=ref)

        def proxy() -> AssetRef:
            if world.proxies:
                world._next(world.proxies, "transcode_proxy")
            return AssetRef(asset_id="p", kind="PROXY", key="proxy/main.mp4", sha256="1" * 64, size=5)

        def renditions() -> RenditionsResult:
            if world.renditions:
                return world._next(world.renditions, "make_renditions")
            return RenditionsResult(renditions=[
                RenditionOut(profile=p, status=RenditionStatus.READY,
                             asset=AssetRef(asset_id=p.value, kind=p.value, key=p.value, sha256="2" * 64, size=1))
                for p in (RenditionProfile.HLS, RenditionProfile.THUMBNAIL)])

        @activity.defn(name="transcode_proxy")
        async def transcode_proxy(req: TranscodeInput) -> AssetRef:
            await world._enter("transcode_proxy", req)
            return proxy()

        @activity.defn(name="make_renditions")
        async def make_renditions(req: TranscodeInput) -> RenditionsResult:
            await world._enter("make_renditions", req)
            return renditions()

        @activity.defn(name="check_output")
        async def check_output(req: CheckInput) -> CheckResult:
            return await world._answer("check_output", req, world.checks)

        @activity.defn(name="make_media")
        async def make_media(req: MediaStepInput) -> MediaStepResult:
            """lean-path-v1: the proxy (its script's failures fail the step), the renditions (a failed one is
            recorded, not raised), the checks when asked, and the close when asked, the checks passed and no
            stray is open."""
            await world._enter("make_media", req)
            made = proxy()
            try:
                summary = renditions().summary()
            except Exception as exc:  # noqa: BLE001 - a failed rendition is recorded, the step goes on
                summary = {"HLS": "FAILED", "THUMBNAIL": "FAILED", "error": str(exc)}
            checks = None if req.checks is None else world._next(world.checks, "check_output")
            closed = None
            if req.close is not None and (checks is None or checks.passed) and not world.strays:
                facts = {"proxy": made.key, "renditions": summary}
                balance = world.settle(req.close)
                closed = balance.model_copy(update={"moved": world.carried(
                    [m.with_facts(**facts) for m in req.close.moves], always=True)})
            return MediaStepResult(proxy=made, renditions=summary, checks=checks, closed=closed)

        @activity.defn(name="choose_route")
        async def choose_route_(req: RouteRequest) -> RouteTaken:
            await world._enter("choose_route", req)
            facts = [RouteFacts(route=r, breaker=world.breakers.get(r.provider, BreakerMode.CLOSED),
                                price=float(RESERVED)) for r in world.routes]
            current = world.route or world.routes[0]  # as the real step: the route the task's row holds
            choice = choose_route(facts, reserved=float(RESERVED), spendable=0.0, lock_model=world.lock_model,
                                  current=current, job_may_exist=req.job_may_exist)
            if req.take:
                world.route = choice.route
            return RouteTaken(choice=choice, fields=RouteFields(
                provider=choice.route.provider, model=choice.route.model, min_poll_interval_s=1.0,
                plan_limits=world.plan_limits))

        @activity.defn(name="request_slot")
        async def request_slot(inp: AdmissionInput) -> SlotGrant | None:
            await world._enter("request_slot", inp)
            tenant_gate = inp.grant_signal is not None  # its limit is the tenant's, sent as the plan's
            if world.ask_answers_lost and inp.at_once:  # admitted and answered, the answer lost: ask_gate's fallback
                world.ask_answers_lost -= 1
                await ask_gate(world.client, inp, world.limit)
                return await ask_gate(world.client, inp.model_copy(update={"at_once": False}), world.limit)
            return await ask_gate(world.client, inp if world.carries else inp.model_copy(update={"at_once": False}),
                                  inp.plan_limits.max_concurrent if tenant_gate else world.limit)

        return [choose_route_, request_slot, record_transition, validate_task, reserve_credit, prepare_task, settle,
                submit, reconcile_submit, abandon_attempt, poll_job, cancel_job, account_stray_job, unaccounted_strays,
                accept_stray_cost, fetch_output, transcode, transcode_proxy, make_renditions, check_output, make_media]


def media_worker(client: Any, queue: str, activities: list[Callable[..., Any]]) -> Worker:
    """The worker of the media queue beside a test's worker on `queue`: only the media steps."""
    return Worker(client, task_queue=api.media_queue(queue),
                  activities=[a for a in activities if a.__name__ in api.MEDIA_ACTIVITIES])


STARTED_GATES: set[str] = set()  # every gate workflow a fake started: a test's teardown ends those of its queue


async def ask_gate(client: Any, inp: AdmissionInput, limit: int, *,
                   breaker: BreakerPolicy | None = None) -> SlotGrant | None:
    """What `request_slot` does, from inside a fake activity: with `at_once` the real `ask` (the slot
    when the gate has one free); else start, then signal (the time-skipping test server drops
    signal-with-start's signal)."""
    queue = activity.info().task_queue
    gate_input = GateInput(provider=inp.provider, limit=limit, grant_signal=inp.grant_signal, breaker=breaker)
    STARTED_GATES.add(api.gate_id(inp.provider, queue))
    if inp.at_once:
        return await admission.ask_gate(client, gate_input, api.gate_id(inp.provider, queue), queue, inp.request)
    gate = await client.start_workflow(
        api.GATE_WORKFLOW_NAME, gate_input, id=api.gate_id(inp.provider, queue), task_queue=queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
    await gate.signal(api.SIGNAL_GATE_REQUEST, inp.request)
    return None


# -- driving a run from a test ---------------------------------------------------------------

async def ending(handle: WorkflowHandle) -> str:
    """How the workflow closed: 'completed', 'canceled' or 'failed:<type>'."""
    try:
        await asyncio.wait_for(handle.result(), timeout=60)
    except WorkflowFailureError as exc:
        if isinstance(exc.cause, CancelledError):
            return "canceled"
        assert isinstance(exc.cause, ApplicationError), exc.cause
        return f"failed:{exc.cause.type}"
    return "completed"


async def until(env, check: Callable[[], bool], *, step_s: float = 5.0, tries: int = 2000) -> None:
    """Let (skipped) time pass until `check()` holds."""
    for _ in range(tries):
        if check():
            return
        await skip(env, step_s)
    raise AssertionError("condition never held")


async def resolve(handle: WorkflowHandle, action: ResolveAction, reason: str = "") -> ResolveResult:
    """An operator's decision on a task in NEEDS_ATTENTION (the `resolve` update), by "ops"."""
    return await handle.execute_update(api.UPDATE_RESOLVE, ResolveRequest(action=action, reason=reason, by="ops"),
                                       result_type=ResolveResult)
