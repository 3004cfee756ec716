"""GenerationWorkflow: one durable workflow per video task. Orchestration only.

The invariants it keeps (docs/architecture.md, "Failure paths"):
- A provider job that may exist is never forgotten: the task ends only when every job it created
  is known terminal at the provider or known never created; otherwise it waits in NEEDS_ATTENTION
  with its reservation held until an operator decides (the `resolve` update).
- "Never created" comes only from the provider's own answer (reconcile); a provider that cannot
  be asked goes to NEEDS_ATTENTION, never to an automatic second submit.
- A cancel, from the `cancel` signal or from Temporal itself, is one path: the running step is
  never interrupted (a submit in flight is waited for), then the job is cancelled; completion
  wins once the provider has succeeded (SUCCEEDED, cancel_outcome TOO_LATE).
- A transition that is not applied means someone else changed the task: the workflow starts
  nothing new, stops what it started and closes the ledger.

Every status change goes through the `record_transition` local activity (the state machine in
Postgres); the TaskStatus search attribute for the Web UI shows it coarsely (RUNNING while in progress).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, NoReturn

from temporalio import workflow
from temporalio.common import Priority, RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.admission import AdmissionActivities
    from activities.errors import (
        BUSINESS_FAILURES,
        DEPENDENCY_UNAVAILABLE,
        DISPATCH_NOT_CLAIMED,
        INSUFFICIENT_CREDIT,
        TASK_NOT_FOUND,
    )
    from activities.fetch import FetchActivities
    from activities.ledger import LedgerActivities
    from activities.media import MediaActivities
    from activities.poll import PollActivities
    from activities.review import ReviewActivities
    from activities.submit import SubmitActivities
    from activities.tasks import TaskActivities
    from contracts import workflow_api as api
    from contracts.admission import AdmissionInput, PlanLimits, SlotGrant, SlotRelease, SlotRenewal, SlotRequest
    from contracts.messages import (
        AssetRef,
        AttemptRef,
        CancelRequest,
        CheckInput,
        GenerationInput,
        GenerationOutcome,
        JobRef,
        LiveDetails,
        PauseRequest,
        PollResult,
        ProviderUpdate,
        ReconcileOutcome,
        ResolveAction,
        ResolveRequest,
        ResolveResult,
        ReviewAction,
        ReviewRequest,
        ReviewResult,
        SettleInput,
        StrayCostAcceptance,
        StrayJobRef,
        SubmitActivityResult,
        TaskInfo,
        TaskRef,
        TranscodeInput,
        TransitionInput,
        TransitionResult,
        run_suffix,
    )
    from contracts.provider import ErrorClass, JobStatus, SubmitOutcome
    from contracts.task import TaskEvent, TaskStatus
    from schema.state_machine import TERMINAL
    from workflows.observations import Inbox, PollCadence, needs_status_call, terminal
    from workflows.queues import fetch_priority, queue_of
    from workflows.search_attributes import TASK_STATUS, shown_status

MAX_PAID_ATTEMPTS = 3  # submits that created (or may have created) a provider job
ADMISSION = "admission-v1"  # workflow.patched: ask the provider's gate for a slot before submitting
WEBHOOKS = "webhooks-v1"  # workflow.patched: with webhooks on, polling is a safety net
RENDITIONS = "renditions-v1"  # workflow.patched: the proxy decides SUCCEEDED; HLS/thumbnail retried on their own
REVIEW = "review-v1"  # workflow.patched: automatic checks, then REVIEW until a person decides
# workflow.patched: every unaccounted duplicate job in the database is accounted before the ledger
# closes; one the provider refuses to answer for waits for a person instead of failing the workflow.
STRAYS = "strays-v1"
STRAY = "stray"  # the stuck step of a task held up by duplicate jobs the provider refuses to answer for
JOB_DEADLINE = "job-deadline-v1"  # workflow.patched: a job's deadline counts from its accepted submit (or its finding)
WEBHOOK_WAKE = "webhook-wake-v1"  # workflow.patched: a webhook that came during a step is acted on at once
# workflow.patched: an accepted duplicate risk after a failed reconcile goes on to a new attempt (the
# abandoned one was reconciled again, found "absent" and un-counted though it may still bill)
ACCEPTED_RISK_ENDS = "accepted-risk-ends-reconcile-v1"
DECISION_WINS = "review-decision-wins-v1"  # workflow.patched: a decision landing with the review deadline wins
# workflow.patched: the task deadline bounds the wait for a slot, a waiting task re-asks its gate (which
# may have been reset or terminated), and NEEDS_ATTENTION gives the slot back while no job may run
ADMISSION_BOUNDED = "admission-bounded-v1"
TASK_QUEUES = "task-queues-v1"  # workflow.patched: media steps run on the media queue (api.media_queue)
# workflow.patched: a task of a tenant with a concurrency limit holds one of its tenant gate's slots
# while it generates (asked before the provider's gate, given back once its job succeeded or it ended)
TENANT_ADMISSION = "tenant-admission-v1"
# workflow.patched: a task of a paused import waits before asking for a slot, and leaves its gate's line
# while paused (it keeps its first place when it asks again); a job already running goes on.
IMPORT_PAUSE = "import-pause-v1"
# workflow.patched: a submit that failed as the provider's breaker counts (5xx, timeout, no connection) is
# reported to the gate: with the slot's release, or, for an unknown outcome (slot kept), by a renewal
BREAKER = "breaker-v1"
# workflow.patched: a step whose retry budget ran out on Postgres or object storage being out of reach (or
# the ledger refusing writes) runs again after a pause, until the task's deadline, instead of ending the task
DEGRADATION = "degradation-v1"
# workflow.patched: an output's fetch (and each run of it after a wait for storage) goes on its queue with a
# priority from the time its provider URL has left (workflows/queues.py `fetch_priority`)
EXPIRY_FIRST = "expiry-first-v1"
# workflow.patched: the TaskStatus search attribute is upserted only when its shown value changes
# (workflows/search_attributes.py `shown_status`: RUNNING for every step in progress)
COARSE_STATUS = "coarse-status-v1"
# workflow.patched, asked once as a run starts: a run that records it was started on code with every patch
# of IMPLIED, so none of those is asked (each would cost a marker and a TemporalChangeVersion upsert in
# every task's history). A patch added after it is asked on its own (`_patched` only answers for IMPLIED).
PATCH_BASELINE = "patch-baseline-v1"
# workflow.patched: moves that follow an activity's own write ride on its request and are committed in its
# transaction (reserve_credit takes validation_passed and queued); not in IMPLIED
TRANSITIONS_IN_WORK = "transition-in-work-v1"
IMPLIED = frozenset({ADMISSION, WEBHOOKS, RENDITIONS, REVIEW, STRAYS, JOB_DEADLINE, WEBHOOK_WAKE, ACCEPTED_RISK_ENDS,
                     DECISION_WINS, ADMISSION_BOUNDED, TASK_QUEUES, TENANT_ADMISSION, IMPORT_PAUSE, BREAKER,
                     DEGRADATION, EXPIRY_FIRST, COARSE_STATUS})
# workflow.patched, asked once as a run starts (before patch-baseline-v1, which it stands for): the moves of
# the main line ride on the steps they follow: submit's transaction A takes dispatch_claimed and B
# provider_accepted, poll_job the move for the status it observes, fetch_output output_persisted, settle the
# ending. A step that does not commit a move it was given (it failed first, or an activity worker from
# before this patch ran it) leaves it to the record_transition local activity, as before.
TRANSITIONS_CARRIED = "transition-in-work-v2"
# workflow.patched, asked first as a run starts (it stands for transition-in-work-v2 and every patch before):
# the submit step renews the slot at the gate itself once the provider accepted (the AIMD increase), after
# its transaction B; the workflow sends the renewal only when the step could not
RENEW_IN_SUBMIT = "renew-in-submit-v1"
# workflow.patched, asked first as a run starts (it stands for renew-in-submit-v1 and every patch before): a
# slot is asked with the gate's `ask` update, whose answer is the slot when the gate has one free at once;
# only a task that waits gets its grant as a signal (and spends a re-ask timer)
GRANT_AT_ONCE = "grant-at-once-v1"
# Patches asked where their path begins (none is on the main line, so none costs a common task a marker):
# a cancel that meets a slot's grant gives the slot back and ends the task before any submit
CANCEL_BEFORE_SUBMIT = "cancel-before-submit-v1"
# a paused task holds no slot of any layer: it waits before its tenant's line, and gives its tenant's slot
# back when a pause finds it asking its provider's gate (it asks both again once resumed)
PAUSE_HOLDS_NOTHING = "pause-holds-nothing-v1"
# a takeover cancels the job this run started and follows it until the provider says it ended (the cancel
# asked again after an outage), so its cost is known before the ledger closes
TAKEOVER_FOLLOWS = "takeover-follows-job-v1"
# `resolve --fail` on a task stuck with a live job cancels that job first (abandoned only when it is the
# cancel itself that cannot be made)
FAIL_STOPS_JOB = "resolve-fail-stops-job-v1"
# a cancel that came while a paid video was fetched or transcoded is too late, review templates included
LATE_CANCEL_DELIVERS = "late-cancel-delivers-v1"
# a cancel while the task waits for a person about a live job it can stop (stuck at poll) stops it at once
ATTENTION_TAKES_CANCEL = "attention-takes-cancel-v1"
# Patches a run asks first, newest first: the first it has stands for the patches listed with it.
BASELINES = ((GRANT_AT_ONCE, IMPLIED | {PATCH_BASELINE, TRANSITIONS_IN_WORK, TRANSITIONS_CARRIED, RENEW_IN_SUBMIT}),
             (RENEW_IN_SUBMIT, IMPLIED | {PATCH_BASELINE, TRANSITIONS_IN_WORK, TRANSITIONS_CARRIED}),
             (TRANSITIONS_CARRIED, IMPLIED | {PATCH_BASELINE, TRANSITIONS_IN_WORK}),
             (PATCH_BASELINE, IMPLIED))
DEPENDENCY_PAUSE_S = 30.0  # between runs of a step waiting for Postgres or object storage to come back
REASK_EVERY = timedelta(minutes=10)  # a waiting task re-sends its request (same place in line) this often
REVIEW_DEADLINE_BY = "review-deadline"  # who approved when the plan's review deadline approves
RENEW_EVERY = timedelta(minutes=5)  # a held slot's lease is renewed this often while its job runs
MAX_POLL_INTERVAL_S = 15.0
OUTAGE_PAUSE_S = 30.0  # between status-call bursts while the provider's status API is down
RETRY_BACKOFF_S = (5.0, 20.0, 60.0)
STOP_GRACE = timedelta(minutes=10)  # after a cancel call, how long the job may take to end
TOO_LATE = "TOO_LATE"

# The stuck step a NEEDS_ATTENTION task resumes with on `resolve --retry`, and the event for it.
RESUME_EVENT = {"poll": TaskEvent.PROVIDER_RUNNING, "reconcile": TaskEvent.SUBMIT_AMBIGUOUS,
                "cancel": TaskEvent.CANCEL_REQUESTED}
# Endings of a task whose paid video waits in POST_PROCESSING for them.
DELIVERED = frozenset({TaskEvent.PLAYABLE_ASSET_READY, TaskEvent.REVIEW_REQUIRED})
# Task statuses a workflow closes as Failed with (the task's reason), so the Web UI shows them.
FAILED_CLOSE = frozenset({TaskStatus.FAILED_FINAL, TaskStatus.EXPIRED, TaskStatus.INVALID})


def _retry(attempts: int | None, *, first_s: float = 1.0, max_s: float = 30.0) -> RetryPolicy:
    """Exponential backoff capped at `max_s`; `attempts` None = until the step succeeds.
    Business failures (activities/errors.py) are never retried."""
    return RetryPolicy(initial_interval=timedelta(seconds=first_s), maximum_interval=timedelta(seconds=max_s),
                       maximum_attempts=attempts or 0, non_retryable_error_types=list(BUSINESS_FAILURES))


# One row per activity: (start_to_close, retry policy, heartbeat timeout). Budgets are for
# infrastructure trouble; what happens when one runs out is the workflow's decision below.
_STEPS: dict[Callable[..., Any], tuple[timedelta, RetryPolicy, timedelta | None]] = {
    TaskActivities.validate_task: (timedelta(seconds=30), _retry(20), None),
    LedgerActivities.reserve_credit: (timedelta(seconds=30), _retry(20), None),
    # A re-run of submit never sends twice (the attempt row says SENDING -> unknown outcome).
    SubmitActivities.submit: (timedelta(seconds=40), _retry(20), None),
    # About 15 minutes, NotYetConclusive retries included; then a person decides.
    SubmitActivities.reconcile_submit: (timedelta(seconds=30), _retry(40, first_s=2.0), None),
    SubmitActivities.abandon_attempt: (timedelta(seconds=30), _retry(None), None),
    AdmissionActivities.request_slot: (timedelta(seconds=30), _retry(None), None),
    # A short burst: the workflow itself rides out longer status outages until the deadline.
    PollActivities.poll_job: (timedelta(seconds=15), _retry(5, max_s=10.0), None),
    # About 18 minutes of provider trouble; then a person decides (the reservation stays held).
    PollActivities.cancel_job: (timedelta(seconds=15), _retry(40, first_s=2.0), None),
    PollActivities.account_stray_job: (timedelta(seconds=30), _retry(None, first_s=5.0, max_s=300.0), None),
    PollActivities.accept_stray_cost: (timedelta(seconds=30), _retry(None), None),
    FetchActivities.fetch_output: (timedelta(minutes=10), _retry(8), timedelta(seconds=30)),
    MediaActivities.transcode: (timedelta(minutes=15), _retry(6), timedelta(seconds=60)),
    # ffmpeg's progress heartbeats every ~0.5 s; its own budget scales with duration and resolution
    # (adapters/media/transcode.py), this bound is only the outer one.
    MediaActivities.transcode_proxy: (timedelta(minutes=30), _retry(6, first_s=2.0), timedelta(seconds=30)),
    MediaActivities.make_renditions: (timedelta(minutes=20), _retry(4, first_s=2.0), timedelta(seconds=30)),
    ReviewActivities.check_output: (timedelta(minutes=5), _retry(6), timedelta(seconds=60)),
    LedgerActivities.settle: (timedelta(seconds=30), _retry(None), None),
}


class TaskEnded(Exception):
    """Internal: the task reached a status where this workflow has nothing more to do."""


class TaskTakenOver(Exception):
    """Internal: a transition was not applied because someone else changed the task."""


@workflow.defn(name=api.WORKFLOW_NAME)
class GenerationWorkflow:
    def __init__(self) -> None:
        self._task_id = ""
        self._run_no = 1
        self._info: TaskInfo | None = None
        self._status = TaskStatus.CREATED
        self._seq = 0
        self._error: str | None = None
        self._cancel: CancelRequest | None = None
        self._cancel_handled = False
        self._cancelled_in_temporal = False
        self._wake = False
        self._inbox = Inbox()  # webhook observations not yet acted on, newest per job
        self._webhooks = False  # the followed job's provider sends webhooks: polling is a safety net
        self._attempt_no = 0
        self._paid = 0
        self._refusals = 0  # refusals before acceptance in a row (backpressure; not a spent attempt)
        self._slot: SlotGrant | None = None
        self._granted: SlotGrant | None = None
        self._tenant_slot: SlotGrant | None = None  # tenant-admission-v1: held while generating
        self._tenant_granted: SlotGrant | None = None
        self._asked_at = None  # when this task first asked its provider's gate (its place in the queue)
        self._tenant_asked_at = None  # likewise at its tenant's gate
        self._renewed_at = None
        self._task_deadline = None
        self._costs: dict[int, float] = {}  # attempt no -> what the provider reports it charged
        self._live: JobRef | None = None  # a job not yet known terminal at the provider
        self._unknown: AttemptRef | None = None  # an attempt whose submit outcome is not known
        self._output_expires: datetime | None = None  # when the succeeded job's output URL expires
        self._strays: list[asyncio.Task[Any]] = []  # strays-v1: each gives (stray, refusal) or None
        self._stuck: str | None = None
        self._resolution: ResolveRequest | None = None
        self._deadline = None  # the followed job's deadline: from its accepted submit (`_track`)
        self._in_review = False  # waiting in REVIEW for a reviewer's decision
        self._decision: ReviewRequest | None = None
        self._booked: float | None = None  # cost settled when the task entered REVIEW
        self._paused_by: str | None = None  # import-pause-v1: who paused the task's import
        self._pause_told = False  # a pause/resume signal came: it outranks what validation read
        self._details = LiveDetails(status=TaskStatus.CREATED.value, step="starting", text="starting")
        self._implied: frozenset[str] = frozenset()  # patches the run's baseline stands for (BASELINES)
        self._carry = False  # transition-in-work-v2: the main line's moves ride on its steps
        self._shown: str | None = None  # coarse-status-v1: the TaskStatus search attribute's last upsert

    # -- messages -------------------------------------------------------------------------

    @workflow.signal(name=api.SIGNAL_CANCEL)
    def cancel(self, request: CancelRequest) -> None:
        self._cancel = self._cancel or request

    @workflow.signal(name=api.SIGNAL_PAUSE)
    def pause(self, request: PauseRequest) -> None:
        self._pause_told = True
        self._paused_by = request.by if request.paused else None

    @workflow.signal(name=api.SIGNAL_SLOT_GRANTED)
    def slot_granted(self, grant: SlotGrant) -> None:
        self._granted = grant

    @workflow.signal(name=api.SIGNAL_TENANT_SLOT_GRANTED)
    def tenant_slot_granted(self, grant: SlotGrant) -> None:
        self._tenant_granted = grant

    @workflow.signal(name=api.SIGNAL_SLOT_CHECK)
    def slot_check(self, grant: SlotGrant) -> None:
        """The gate checks that a silent holder still runs; being delivered is the answer."""

    @workflow.signal(name=api.SIGNAL_PROVIDER_UPDATE)
    def provider_update(self, update: ProviderUpdate) -> None:
        """A webhook, matched to this task by the gateway: kept if it says something new."""
        if self._inbox.offer(update):
            self._wake = True

    @workflow.query(name=api.QUERY_STATUS)
    def status(self) -> str:
        return self._status.value

    @workflow.query(name=api.QUERY_DETAILS)
    def details(self) -> LiveDetails:
        return self._details

    @workflow.update(name=api.UPDATE_RESOLVE)
    async def resolve(self, request: ResolveRequest) -> ResolveResult:
        self._resolution = request
        # Done once carried out: the task left NEEDS_ATTENTION, or waits there for a new decision
        # (a retried stray refused again, on the way to a failure that ends from NEEDS_ATTENTION).
        await workflow.wait_condition(lambda: self._resolution is None and (
            self._status is not TaskStatus.NEEDS_ATTENTION or self._stuck is not None))
        return ResolveResult(status=self._status, message=f"{request.action.value} applied by {request.by}")

    @resolve.validator
    def _check_resolve(self, request: ResolveRequest) -> None:
        if self._status is not TaskStatus.NEEDS_ATTENTION or self._stuck is None or self._resolution is not None:
            raise ValueError(f"task is {self._status.value}, not waiting for a decision")
        if request.action is ResolveAction.ACCEPT_DUPLICATE_RISK and self._stuck not in ("reconcile", STRAY):
            raise ValueError(f"accept-duplicate-risk applies to an unknown submit or a duplicate job; this task "
                             f"is stuck at {self._stuck}")
        if request.action is ResolveAction.FAIL and not request.reason.strip():
            raise ValueError("failing a task needs a reason")

    @workflow.update(name=api.UPDATE_REVIEW)
    async def review(self, request: ReviewRequest) -> ReviewResult:
        self._decision = request
        await workflow.wait_condition(lambda: self._decision is None)
        return ReviewResult(status=self._status, message=f"{request.action.value} by {request.by}")

    @review.validator
    def _check_review(self, request: ReviewRequest) -> None:
        if not self._in_review or self._status is not TaskStatus.REVIEW or self._decision is not None:
            raise ValueError(f"task is {self._status.value}, not in REVIEW waiting for a decision")
        if request.action is ReviewAction.REJECT and not request.reason.strip():
            raise ValueError("rejecting a video needs a reason")
        if request.action is ReviewAction.REGENERATE and self._paid >= MAX_PAID_ATTEMPTS:
            raise ValueError(f"no paid attempt left to regenerate: {self._paid} of {MAX_PAID_ATTEMPTS} used")
        if request.prompt is not None and not request.prompt.strip():
            raise ValueError("an edited prompt cannot be empty")

    # -- the run ----------------------------------------------------------------------------

    @workflow.run
    async def run(self, inp: GenerationInput) -> GenerationOutcome:
        self._task_id, self._run_no = inp.task_id, inp.run
        self._implied = next((frozenset({patch}) | implied for patch, implied in BASELINES
                              if workflow.patched(patch)), frozenset())
        self._carry = self._patched(TRANSITIONS_CARRIED)
        work = asyncio.create_task(self._produce())
        while True:
            try:
                await asyncio.shield(work)  # a Temporal cancel must not interrupt a step midway
                break
            except asyncio.CancelledError:
                if work.done():
                    break
                self._cancelled_in_temporal = True
                self.cancel(CancelRequest(reason=workflow.cancellation_reason() or "cancelled in Temporal",
                                          requested_by="temporal"))
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self._close()

    def _close(self) -> GenerationOutcome:
        """How the workflow itself closes: Canceled / Failed (with the task's reason) / Completed."""
        if self._status is TaskStatus.CANCELED and self._cancelled_in_temporal:
            raise asyncio.CancelledError(self._error or "canceled")
        if self._status in FAILED_CLOSE:
            raise ApplicationError(f"{self._status.value}: {self._error}", type=self._status.value,
                                   non_retryable=True)
        return GenerationOutcome(task_id=self._task_id, status=self._status, attempts=self._attempt_no,
                                 cost=self._cost(), error=self._error)

    async def _produce(self) -> None:
        try:
            await self._validate_and_reserve()
            job = await self._generate()
            await self._deliver(job)
        except TaskEnded:
            pass
        except TaskTakenOver:
            await self._clean_up_after_takeover()
        except ActivityError as exc:  # a step ran out of its budget where no job can be live
            with contextlib.suppress(TaskEnded, TaskTakenOver):
                await self._end(TaskEvent.FINAL_FAILURE, error=_describe(exc), error_class="activity_failed")

    async def _validate_and_reserve(self) -> None:
        self._tell("validating", "checking the inputs and reserving credit")
        await self._move(TaskEvent.VALIDATION_STARTED)
        checked = await self._run(TaskActivities.validate_task, TaskRef(task_id=self._task_id, run=self._run_no))
        self._info = checked.info
        if not self._pause_told:
            self._paused_by = checked.info.paused_by
        self._attempt_no = checked.info.current_attempt_no  # a re-driven task continues its numbering
        self._deadline = workflow.now() + timedelta(seconds=checked.info.deadline_s)
        self._task_deadline = workflow.now() + timedelta(seconds=checked.info.task_deadline_s)
        if not checked.ok:
            await self._end(TaskEvent.VALIDATION_FAILED, error=checked.reason, error_class="invalid_input")
        in_work = self._patched(TRANSITIONS_IN_WORK)
        bounded = self._patched(ADMISSION_BOUNDED) if in_work else False
        moves = [self._request(TaskEvent.VALIDATION_PASSED),
                 self._request(TaskEvent.QUEUED, deadline_at=self._task_deadline if bounded else None)
                 ] if in_work else []
        try:
            reserved = await self._run(LedgerActivities.reserve_credit,
                                       TaskRef(task_id=self._task_id, run=self._run_no, moves=moves))
        except ActivityError as exc:
            if _error_type(exc) != INSUFFICIENT_CREDIT:
                raise
            await self._end(TaskEvent.FINAL_FAILURE, error=_describe(exc), error_class="credit")
        if in_work:
            await self._carried(moves, reserved.moved)
            return
        await self._move(TaskEvent.VALIDATION_PASSED)
        bounded = self._patched(ADMISSION_BOUNDED)
        await self._move(TaskEvent.QUEUED, deadline_at=self._task_deadline if bounded else None)

    async def _generate(self) -> JobRef:
        """Submit attempts until a job succeeds, holding a slot of the task's tenant throughout
        (tenant-admission-v1); every other ending raises TaskEnded."""
        await self._take_tenant_slot()
        try:
            return await self._attempts()
        finally:
            await self._give_tenant_slot()

    async def _attempts(self) -> JobRef:
        while True:
            if self._cancel_pending():
                await self._end(TaskEvent.CANCEL_REQUESTED, payload=self._cancel_payload())
            if self._paid >= MAX_PAID_ATTEMPTS:
                await self._end(TaskEvent.FINAL_FAILURE, error=f"no success after {self._paid} paid attempts",
                                error_class="retry_budget")
            if workflow.now() >= self._task_deadline:
                await self._end(TaskEvent.DEADLINE_PASSED, error="the task's deadline passed before a job succeeded")
            if not await self._admit():
                continue
            if self._cancel_pending() and self._patched(CANCEL_BEFORE_SUBMIT):
                continue  # the slot came with a cancel: the loop's top ends the task, giving it back
            self._attempt_no += 1
            claim = self._request(TaskEvent.DISPATCH_CLAIMED,
                                  payload={"slot": self._slot.token} if self._slot else None)
            if not self._carry:
                await self._record(claim)
            job = await self._submit(AttemptRef(task_id=self._task_id, attempt_no=self._attempt_no,
                                                moves=[claim] if self._carry else [],
                                                accepted=(self._offer(TaskEvent.PROVIDER_ACCEPTED)
                                                          if self._carry else None),
                                                **self._renewal_on_acceptance()))
            if job is None:
                continue
            final = await self._follow(job)
            if final.status is JobStatus.SUCCEEDED:
                self._output_expires = final.output_expires_at
                return job
            if final.error_class in (ErrorClass.MODERATION, ErrorClass.NON_RETRYABLE):
                await self._end(TaskEvent.FINAL_FAILURE, error=final.error, error_class=final.error_class.value)
            await self._retry_wait(final.error or f"provider job {final.raw_status}", final.error_class)

    async def _submit(self, ref: AttemptRef) -> JobRef | None:
        """One submit; the job to follow, or None once the task is back in QUEUED."""
        self._tell("submitting", f"submitting attempt {ref.attempt_no} to {self._info.provider}")
        try:
            sent = await self._send(ref)
        except ActivityError as exc:  # out of budget: the call may have gone out, so ask, never resend
            if _error_type(exc) in BUSINESS_FAILURES:
                raise
            outcome, error, error_class, retry_after = SubmitOutcome.UNKNOWN, _describe(exc), None, None
            job_id = failure = None
        else:
            outcome, error, error_class = sent.outcome, sent.error, sent.error_class
            retry_after, job_id, failure = sent.retry_after_s, sent.job_id, sent.failure
            self._webhooks = sent.webhooks and self._patched(WEBHOOKS)
            for early in sent.early_updates:  # webhooks that came before the submit's answer
                self._inbox.offer(early)
        if outcome is SubmitOutcome.ACCEPTED:
            self._paid += 1
            self._refusals = 0
            if sent.renewed:  # the submit step told the gate
                self._renewed_at = workflow.now()
            else:
                await self._renew_slot(accepted=True)
            if ref.accepted is None:
                await self._move(TaskEvent.PROVIDER_ACCEPTED, payload={"job_id": job_id})
            else:
                await self._take(ref.accepted.with_facts(job_id=job_id), sent.moved[len(ref.moves):])
            return self._track(job_id)
        if outcome is SubmitOutcome.UNKNOWN:
            self._paid += 1
            self._unknown = ref
            await self._report_failure(failure)
            await self._move(TaskEvent.SUBMIT_AMBIGUOUS, error=error, error_class=ErrorClass.UNKNOWN_OUTCOME.value)
            return await self._reconcile(ref)
        if outcome is SubmitOutcome.REJECTED_RETRYABLE:  # backpressure, not a spent attempt
            self._refusals += 1
            reported = failure if failure and self._patched(BREAKER) else None
            await self._release_slot(throttled=True, retry_after_s=retry_after, failure=reported)
            await self._retry_wait(error or "provider refused the submit", error_class, retry_after)
            return None
        await self._end(TaskEvent.FINAL_FAILURE, error=error,
                        error_class=(error_class or ErrorClass.NON_RETRYABLE).value)

    async def _send(self, ref: AttemptRef) -> SubmitActivityResult:
        """The submit step, the dispatch move it carries taken in; a submit that failed has it recorded on
        its own. An activity worker from before transition-in-work-v2 ignores the move and refuses to send
        for a task not DISPATCHING: once the move is recorded it is asked again, without it."""
        try:
            sent = await self._run(SubmitActivities.submit, ref)
        except ActivityError as exc:
            claimed = await self._carried(ref.moves, [])
            if not ref.moves or _error_type(exc) != DISPATCH_NOT_CLAIMED or not all(c.applied for c in claimed):
                raise
            return await self._send(ref.model_copy(update={"moves": []}))
        await self._carried(ref.moves, sent.moved[:len(ref.moves)])
        return sent

    async def _reconcile(self, ref: AttemptRef) -> JobRef | None:
        """Find out whether an unknown submit created a job, before anything is sent again."""
        self._tell("reconciling", f"asking {self._info.provider} whether attempt {ref.attempt_no} created a job")
        while True:
            try:
                found = await self._run(SubmitActivities.reconcile_submit, ref)
            except ActivityError as exc:
                if _error_type(exc) == TASK_NOT_FOUND:
                    raise
                decision = await self._attention("reconcile", f"cannot ask the provider: {_describe(exc)}")
                if decision.action is ResolveAction.ACCEPT_DUPLICATE_RISK and self._patched(ACCEPTED_RISK_ENDS):
                    await self._release_slot()  # the attempt is abandoned: asking again would call it absent
                    return None
                continue
            if found.outcome is ReconcileOutcome.FOUND:
                self._unknown = None
                for early in found.early_updates:  # webhooks that came while nobody knew the job
                    self._inbox.offer(early)
                await self._move(TaskEvent.PROVIDER_JOB_FOUND, payload={"job_id": found.job_id,
                                                                "duplicates": found.duplicates})
                self._account_strays(ref, found.duplicates)
                return self._track(found.job_id)
            if found.outcome is ReconcileOutcome.ABSENT:
                self._unknown = None
                self._paid -= 1  # nothing was created, nothing will bill
                await self._release_slot()
                delay = self._retry_delay(None)
                await self._move(TaskEvent.CONFIRMED_NOT_CREATED, payload={"evidence": found.evidence},
                                 next_retry_at=workflow.now() + timedelta(seconds=delay))
                await self._wait_then_requeue(delay)
                return None
            decision = await self._attention("reconcile", found.evidence)
            if decision.action is ResolveAction.ACCEPT_DUPLICATE_RISK:
                await self._release_slot()
                return None

    async def _follow(self, job: JobRef) -> PollResult:
        """Follow the job until it ends: status calls on a growing interval (a safety net when the
        provider sends webhooks), webhook observations as they come; both go through `_reduce`.
        Returns a terminal result that is not a stop we asked for (that ends the task)."""
        cadence = PollCadence(webhooks=self._webhooks, min_interval_s=self._info.min_poll_interval_s,
                              max_s=MAX_POLL_INTERVAL_S)
        next_call = self._jittered(cadence.first()) if cadence.webhooks else workflow.now()
        last_call, slept_out = None, False
        while True:
            if self._cancel_pending():
                self._cancel_handled = True
                await self._move(TaskEvent.CANCEL_REQUESTED, payload=self._cancel_payload())
                return await self._stop(job, TaskEvent.CANCEL_CONFIRMED)
            update = self._inbox.take(job.job_id)
            if update is not None and not needs_status_call(update):
                await self._reduce(update.status)  # signed and not final: no status call needed
            elif update is not None:  # confirm it with a status call soon, spaced as the provider asks
                soonest = last_call + timedelta(seconds=cadence.floor) if last_call else workflow.now()
                next_call = min(next_call, soonest)
            if slept_out or workflow.now() >= next_call:
                offers = self._reductions() if self._carry else None
                polled = await self._poll(job, offers=offers)
                last_call = workflow.now()
                await self._renew_slot()
                if polled is not None:
                    if await self._reduce(polled.status, offers, polled.moved):
                        return polled
                elif workflow.now() >= self._deadline:
                    await self._attention("poll", f"no status for job {job.job_id} until the task's deadline")
                    self._deadline = workflow.now() + timedelta(seconds=self._info.deadline_s)
                    continue
                next_call = self._jittered(cadence.next() if polled is not None else OUTAGE_PAUSE_S)
            if workflow.now() >= self._deadline:
                return await self._stop(job, TaskEvent.DEADLINE_PASSED,
                                        error="provider job did not finish before the deadline")
            if self._inbox.holds(job.job_id) and self._patched(WEBHOOK_WAKE):
                slept_out = False  # a webhook came while the last step ran: act on it now, not at the next call
                continue
            slept_out = await self._pause_until(next_call, wake_on_update=True)

    async def _reduce(self, status: JobStatus | None, offers: dict[JobStatus, TransitionInput] | None = None,
                      moved: list[TransitionResult] | None = None) -> bool:
        """The one place where what a provider says about the followed job moves the task, whether
        a status call or a webhook said it; True once the job ended. Never moves a task back. A status
        call that carried the moves (`_reductions`, transition-in-work-v2) committed the one its status
        calls for."""
        if offers is not None:
            if status in offers:
                await self._take(offers[status], moved or [])
            return terminal(status)
        if status is JobStatus.RUNNING and self._status is TaskStatus.SUBMITTED:
            await self._move(TaskEvent.PROVIDER_RUNNING)
        if status is JobStatus.SUCCEEDED:
            await self._move(TaskEvent.PROVIDER_SUCCEEDED)
        return terminal(status)

    def _reductions(self) -> dict[JobStatus, TransitionInput]:
        """What `_reduce` would record for each status a status call may observe, offered to the call."""
        offers = {JobStatus.SUCCEEDED: self._offer(TaskEvent.PROVIDER_SUCCEEDED)}
        if self._status is TaskStatus.SUBMITTED:
            offers[JobStatus.RUNNING] = self._offer(TaskEvent.PROVIDER_RUNNING)
        return offers

    async def _stop(self, job: JobRef, ending: TaskEvent, error: str | None = None) -> PollResult:
        """Cancel the job and end the task with `ending` once it is terminal; a job that succeeded
        meanwhile is returned instead (completion wins: the video is paid for)."""
        final = await self._stop_live(job)
        if final.status is JobStatus.SUCCEEDED:
            if self._status is TaskStatus.CANCEL_REQUESTED:
                await self._move(TaskEvent.COMPLETION_WON, cancel_outcome=TOO_LATE)
            else:
                await self._move(TaskEvent.PROVIDER_SUCCEEDED)
            return final
        await self._end(ending, error=error, payload={"provider_status": final.raw_status, "job_id": job.job_id})

    async def _stop_live(self, job: JobRef, *, person: bool = True) -> PollResult:
        """Cancel `job` and follow it until the provider says it ended (or a person steps in). Without
        `person` (a task taken over: nobody can be asked) the cancel is asked again after a quiet
        round, status calls spaced out, until the job ends: its reservation stays held meanwhile."""
        first_s = max(self._info.min_poll_interval_s, 2.0)
        while True:
            state = await self._cancel_job(job, person=person)
            stop_by, pace = workflow.now() + STOP_GRACE, first_s
            while not state.terminal and workflow.now() < stop_by:
                await self._pause(pace, wake_on_cancel=False)
                state = await self._poll(job, ask_on_refusal=False) or state
                pace = pace if person else min(pace * 2, MAX_POLL_INTERVAL_S)
            if state.terminal:
                return state
            if person:
                await self._attention("cancel", f"job {job.job_id} still {state.raw_status} after the cancel call")
            else:
                await self._pause(STOP_GRACE.total_seconds(), wake_on_cancel=False)

    async def _cancel_job(self, job: JobRef, *, person: bool = True) -> PollResult:
        while True:
            try:
                state = await self._run(PollActivities.cancel_job, job)
            except ActivityError as exc:
                if person:
                    await self._attention("cancel", f"cannot cancel job {job.job_id}: {_describe(exc)}")
                else:
                    await self._pause(OUTAGE_PAUSE_S, wake_on_cancel=False)
                continue
            await self._observe(job, state)
            return state

    async def _poll(self, job: JobRef, *, ask_on_refusal: bool = True,
                    offers: dict[JobStatus, TransitionInput] | None = None) -> PollResult | None:
        """One status call (with the moves it may commit); None while the provider's status API is
        unreachable. A provider that refuses to answer for the job (not an outage) sends the task to a
        person first."""
        try:
            polled = await self._run(PollActivities.poll_job, job.model_copy(update={"move_on": offers})
                                     if offers else job)
        except ActivityError as exc:
            if ask_on_refusal and _error_type(exc) in BUSINESS_FAILURES:
                await self._attention("poll", f"job {job.job_id}: {_describe(exc)}")
            return None
        await self._observe(job, polled)
        return polled

    async def _deliver(self, job: JobRef) -> NoReturn:
        """Copy the output, make the renditions, settle, SUCCEEDED. The provider job is done and
        paid for, so a cancel now is too late and a failure still settles its cost."""
        renditions = self._patched(RENDITIONS)
        try:
            self._tell("fetching", f"copying job {job.job_id}'s video into our storage")
            persist = [self._offer(TaskEvent.OUTPUT_PERSISTED)] if self._carry else []
            raw = await self._run(FetchActivities.fetch_output, job.model_copy(update={"moves": persist}))
            if persist:
                await self._take(persist[0].with_facts(raw_key=raw.key, sha256=raw.sha256), raw.moved)
            else:
                await self._move(TaskEvent.OUTPUT_PERSISTED, payload={"raw_key": raw.key, "sha256": raw.sha256})
            media = TranscodeInput(task_id=self._task_id, raw_asset_id=raw.asset_id)
            self._tell("transcoding", "transcoding the proxy MP4")
            if renditions:
                proxy = await self._run(MediaActivities.transcode_proxy, media)
            else:
                proxy = (await self._run(MediaActivities.transcode, media)).proxy
        except ActivityError as exc:
            await self._end(TaskEvent.FINAL_FAILURE, error=_describe(exc),
                            error_class=_error_type(exc) or "activity_failed")
        ready = {"proxy": proxy.key}
        if renditions:
            ready["renditions"] = await self._renditions(media)
        await self._review(proxy)
        late = self._cancel is not None
        await self._end(TaskEvent.PLAYABLE_ASSET_READY, payload=ready, cancel_outcome=TOO_LATE if late else None)

    async def _renditions(self, media: TranscodeInput) -> dict[str, str]:
        """HLS and thumbnail with their own retries. A failure never costs the task its proxy: it
        stays recorded on its rendition row (FAILED, with the error) for a later retry."""
        self._tell("transcoding", "making the HLS rendition and the thumbnail")
        try:
            made = await self._run(MediaActivities.make_renditions, media)
        except ActivityError as exc:
            return {"failed": _describe(exc)}
        return made.summary()

    async def _review(self, proxy: AssetRef) -> None:
        """Checks, then REVIEW until a person decides, when the plan asks for it; returns when it
        does not. The provider already charged, so the credit is settled on entering REVIEW; a
        regenerate runs a new paid attempt and comes back here with its video."""
        policy = self._info.review
        if policy is None or not self._patched(REVIEW):
            return
        if self._cancel is not None and self._patched(LATE_CANCEL_DELIVERS):
            return  # a cancel that came while the paid video was delivered is too late (completion wins)
        self._tell("checking", "automatic checks of the video (black, frozen, duration, audio)")
        checks = await self._run(ReviewActivities.check_output, CheckInput(
            task_id=self._task_id, attempt_no=self._attempt_no, proxy_asset_id=proxy.asset_id,
            aspect_ratio=self._info.aspect_ratio, duration_s=self._info.duration_s, policy=policy))
        if not policy.required and checks.passed:
            return
        await self._close_ledger(TaskEvent.REVIEW_REQUIRED)
        self._booked = self._cost()
        await self._move(TaskEvent.REVIEW_REQUIRED, payload={
            "proxy": proxy.key, "checks_passed": checks.passed,
            "failed_checks": [c.name for c in checks.checks if not c.passed]})
        self._in_review = True
        self._tell("waiting_for_person", f"in review: waiting for a reviewer's decision (deadline in "
                                         f"{policy.deadline_s / 3600:g} h, then {policy.on_deadline})",
                   waiting_for="review decision" + ("" if checks.passed else " (automatic checks failed)"))
        try:
            await workflow.wait_condition(lambda: self._decision is not None or self._cancel_pending(),
                                          timeout=timedelta(seconds=policy.deadline_s))
        except TimeoutError:
            # A decision accepted in the same activation as the deadline's timer wins: the reviewer
            # was told it was taken, and its update must complete (runs from before ignored it).
            if self._decision is None or not self._patched(DECISION_WINS):
                self._in_review = False
                if policy.on_deadline == "approve":
                    await self._end(TaskEvent.REVIEW_APPROVED, payload={"decision": "approve", "by": REVIEW_DEADLINE_BY,
                                                                "reason": "review deadline passed"})
                await self._end(TaskEvent.DEADLINE_PASSED, error="no review decision before the review deadline",
                                error_class="review_deadline")
        self._in_review = False
        if self._decision is None:  # a cancel: the video exists and is paid for, nothing to stop
            await self._move(TaskEvent.CANCEL_REQUESTED, payload=self._cancel_payload())
            await self._end(TaskEvent.CANCEL_CONFIRMED)
        await self._decide(self._decision)
        # A new production window: the review wait does not count against the new attempt's deadlines
        # (`_track` restarts the job's deadline at its submit; older runs restart it here).
        if not self._patched(JOB_DEADLINE):
            self._deadline = workflow.now() + timedelta(seconds=self._info.deadline_s)
        self._task_deadline = max(self._task_deadline, workflow.now() + timedelta(seconds=self._info.task_deadline_s))
        await self._deliver(await self._generate())

    async def _decide(self, decision: ReviewRequest) -> None:
        """Record the reviewer's decision (a state event naming them); approve and reject end the task."""
        payload = {"decision": decision.action.value, "by": decision.by, "reason": decision.reason}
        try:
            if decision.action is ReviewAction.APPROVE:
                await self._end(TaskEvent.REVIEW_APPROVED, payload=payload)
            if decision.action is ReviewAction.REJECT:
                await self._end(TaskEvent.REVIEW_REJECTED, error=f"rejected by {decision.by}: {decision.reason}",
                                error_class="review", payload=payload)
            await self._move(TaskEvent.REVIEW_REGENERATE, payload={**payload, "prompt": decision.prompt},
                             prompt_override=decision.prompt)
        finally:
            self._decision = None

    # -- waiting ----------------------------------------------------------------------------

    async def _retry_wait(self, error: str, error_class: ErrorClass | None, hint_s: float | None = None) -> None:
        delay = self._retry_delay(hint_s)
        self._tell("retry_wait", f"next attempt in {delay:.0f} s after: {error}")
        await self._move(TaskEvent.RETRYABLE_FAILURE, error=error,
                         error_class=(error_class or ErrorClass.RETRYABLE).value,
                         next_retry_at=workflow.now() + timedelta(seconds=delay))
        await self._wait_then_requeue(delay)

    def _retry_delay(self, hint_s: float | None) -> float:
        """The provider's Retry-After if longer, else 5 s / 20 s / 60 s by paid attempts (doubling per
        refusal in a row), with jitter."""
        backoff = RETRY_BACKOFF_S[min(max(self._paid, 1), len(RETRY_BACKOFF_S)) - 1]
        if self._refusals > 1:
            backoff = min(backoff * 2 ** (self._refusals - 1), RETRY_BACKOFF_S[-1])
        return max(hint_s or 0.0, backoff) * workflow.random().uniform(0.9, 1.1)

    async def _wait_then_requeue(self, delay_s: float) -> None:
        """RETRY_WAIT: no job is live, so a cancel ends the task at once."""
        await self._pause(delay_s)
        if self._cancel_pending():
            await self._end(TaskEvent.CANCEL_REQUESTED, payload=self._cancel_payload())
        await self._move(TaskEvent.RETRY_DUE)

    async def _pause(self, seconds: float, *, wake_on_update: bool = False, wake_on_cancel: bool = True) -> None:
        """Sleep `seconds` (jittered), ended early by a new cancel request (or a webhook)."""
        await self._pause_until(self._jittered(seconds), wake_on_update=wake_on_update, wake_on_cancel=wake_on_cancel)

    async def _pause_until(self, until: datetime, *, wake_on_update: bool = False,
                           wake_on_cancel: bool = True) -> bool:
        """Sleep until `until`; True if it slept that long, False if woken early."""
        self._wake = False
        try:
            await workflow.wait_condition(
                lambda: (wake_on_cancel and self._cancel_pending()) or (wake_on_update and self._wake),
                timeout=max(until - workflow.now(), timedelta(milliseconds=1)),
            )
        except TimeoutError:
            return True
        return False

    @staticmethod
    def _jittered(seconds: float) -> datetime:
        return workflow.now() + timedelta(seconds=seconds * workflow.random().uniform(0.8, 1.2))

    async def _attention(self, stuck: str, evidence: str | None, **more: Any) -> ResolveRequest:
        """NEEDS_ATTENTION with the evidence; wait for an operator's decision and carry it out
        (a retry returns here for the caller to run its step again; a decision on strays is the
        caller's to carry out)."""
        self._stuck = stuck
        self._tell("waiting_for_person", f"needs attention (stuck at {stuck}): {evidence}; decide with "
                                         f"`reelqueue resolve {self._task_id}`", waiting_for=evidence or stuck)
        await self._move(TaskEvent.NEEDS_ATTENTION, error=evidence, error_class="needs_attention",
                         payload={"stuck": stuck, "evidence": evidence,
                                  "job_id": self._live.job_id if self._live else None,
                                  "unknown_attempt": self._unknown.attempt_no if self._unknown else None, **more})
        takes_cancel = stuck == "poll" and self._live is not None and self._patched(ATTENTION_TAKES_CANCEL)
        released = await self._wait_for_decision(takes_cancel=takes_cancel)
        if self._resolution is None:  # a cancel came: the job is followed again, and the cancel stops it
            self._stuck = None
            await self._move(RESUME_EVENT[stuck], payload={"cancel": self._cancel.reason,
                                                           "by": self._cancel.requested_by})
            return ResolveRequest(action=ResolveAction.RETRY, by=self._cancel.requested_by, reason="cancel requested")
        decision, self._stuck = self._resolution, None
        if stuck == STRAY:
            self._resolution = None
            return decision
        decided = _decided(decision)
        try:
            if decision.action is ResolveAction.FAIL:
                # A job that can still be cancelled is, by `_end` (a cancel that cannot be made comes back
                # here, stuck at cancel, and the same decision abandons it)
                stops = stuck != "cancel" and self._live is not None and self._patched(FAIL_STOPS_JOB)
                await self._abandon_open_attempts(keep_live=stops)
                await self._end(TaskEvent.FINAL_FAILURE, error=f"failed by {decision.by}: {decision.reason}",
                                error_class="operator", payload=decided)
            if decision.action is ResolveAction.ACCEPT_DUPLICATE_RISK:
                await self._abandon_open_attempts()
                await self._move(TaskEvent.ATTENTION_RESOLVED, payload=decided)
            else:
                await self._move(RESUME_EVENT[stuck], payload=decided)
        finally:
            self._resolution = None
        if released and decision.action is ResolveAction.RETRY:
            await self._await_slot(None, reask=True)  # the step runs again under a slot (or a cancel came)
        return decision

    async def _wait_for_decision(self, *, takes_cancel: bool = False) -> bool:
        """Wait for the operator, holding the slot only while a job of this task may be running at the
        provider; True if the slot was given back meanwhile. With `takes_cancel` (a live job this run
        can stop) a cancel ends the wait too."""
        hold = self._slot_hold() if self._patched(ADMISSION_BOUNDED) else None
        if self._slot is not None and hold is not None:
            if hold:
                with contextlib.suppress(TimeoutError):
                    await workflow.wait_condition(lambda: self._resolution is not None, timeout=hold)
            if self._resolution is None:
                await self._release_slot()
                await workflow.wait_condition(lambda: self._resolution is not None)
                return True
        await workflow.wait_condition(lambda: self._resolution is not None or (takes_cancel and self._cancel_pending()))
        return False

    def _slot_hold(self) -> timedelta | None:
        """How long a task waiting for a person keeps its slot; None: until the person decides.
        A followed job (stuck at poll or cancel) is alive at the provider: kept. An unknown submit
        may have created a job we cannot see or stop; such a job ends at the provider on its own,
        so the slot is kept for one job deadline and then given back. Otherwise nothing runs."""
        if self._live is not None:
            return None
        if self._unknown is not None:
            return timedelta(seconds=self._info.deadline_s)
        return timedelta(0)

    # -- endings ----------------------------------------------------------------------------

    async def _end(self, event: TaskEvent, *, error: str | None = None, error_class: str | None = None,
                   payload: dict | None = None, cancel_outcome: str | None = None) -> NoReturn:
        """The one way a task ends: stop any live job, close the ledger, record the final move."""
        if self._live is not None:
            await self._stop_live(self._live)
        await self._release_slot()
        ending = {"error": error, "error_class": error_class, "payload": payload, "cancel_outcome": cancel_outcome}
        event = await self._close_ledger(event, ending if self._carry else None)
        self._error = error
        if not self._carry:
            await self._move(event, **ending)
        self._tell("ended", f"ended {self._status.value}" + (f": {error}" if error else ""))
        raise TaskEnded(error)

    async def _clean_up_after_takeover(self) -> None:
        """Someone else ended the task (e.g. `reelqueue cancel` before this run started): start
        nothing new, stop the job this run started, and close the ledger."""
        self._error = f"task ended outside this workflow ({self._status.value})"
        if self._live is not None and self._patched(TAKEOVER_FOLLOWS):
            await self._stop_live(self._live, person=False)  # its cost known before the ledger closes
        elif self._live is not None:
            state = await self._run(PollActivities.cancel_job, self._live)
            await self._observe(self._live, state)
        await self._release_slot()
        await self._close_ledger(TaskEvent.CANCEL_CONFIRMED)

    async def _close_ledger(self, event: TaskEvent, ending: dict[str, Any] | None = None) -> TaskEvent:
        """Settle what providers charged (possibly nothing) and release the rest of the hold;
        duplicate jobs are accounted first, as ADJUSTMENTs of their own. Returns the event that
        ends the task (a person's decision on strays may change it); with `ending` (the final move's
        fields, transition-in-work-v2) that move is committed with the ledger's rows."""
        if self._patched(STRAYS):
            event = await self._settle_strays(event)
        elif self._strays:
            await asyncio.gather(*self._strays)
            self._strays = []
        booked = self._booked  # review closed the reservation: later attempts are charged on their own
        final = [self._offer(event, **ending)] if ending is not None else []
        settled = await self._run(LedgerActivities.settle, SettleInput(
            task_id=self._task_id, run=self._run_no, attempt_no=self._attempt_no or None,
            cost=self._cost() if booked is None else round(self._cost() - booked, 6),
            reason=event.value, after_review=booked is not None, moves=final))
        if booked is not None:
            self._booked = self._cost()
        if final:
            await self._take(final[0], settled.moved)
        return event

    async def _settle_strays(self, ending: TaskEvent) -> TaskEvent:
        """Every duplicate job of the task accounted before its ledger closes: the ones this run
        found, then any other the database holds unaccounted (a late submit answer, a reconcile
        whose answer was lost). Jobs the provider refuses to answer for wait for a person: retry,
        accept their cost as unknown (the task's estimate each), or fail the task (the same
        booking first); the task then ends as it was going to. A task taken over, or deciding in
        REVIEW (its reservation already closed), has nothing to hold: the workflow books them."""
        before = self._status
        while True:
            refused = await self._account_every_stray()
            if not refused:
                return ending
            evidence = "; ".join(why for _, why in refused)
            if before in TERMINAL or before is TaskStatus.REVIEW:  # nothing held to wait with: book the estimate
                why = "task ended outside this workflow" if before in TERMINAL else "found after review"
                await self._accept_strays(refused, ResolveRequest(
                    action=ResolveAction.ACCEPT_DUPLICATE_RISK, by="workflow", reason=f"{why}; {evidence}"))
                continue
            decision = await self._attention(STRAY, evidence, strays=[job.job_id for job, _ in refused])
            if decision.action is not ResolveAction.RETRY:
                await self._accept_strays(refused, decision)
            if decision.action is ResolveAction.FAIL:
                await self._end(TaskEvent.FINAL_FAILURE, error=f"failed by {decision.by}: {decision.reason}",
                                error_class="operator", payload=_decided(decision))
            ending = await self._return_to(ending, decision)

    async def _account_every_stray(self) -> list[tuple[StrayJobRef, str]]:
        """Wait for the strays this run is accounting, then account those the database still holds;
        the ones the provider refused, with why."""
        results = await asyncio.gather(*self._strays)
        self._strays = []
        refused = [r for r in results if r is not None]
        skip = {job.job_id for job, _ in refused}
        pending = await workflow.execute_local_activity_method(  # one short read at every task's end: local
            PollActivities.unaccounted_strays, TaskRef(task_id=self._task_id, run=self._run_no),
            start_to_close_timeout=timedelta(seconds=15),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=30)))
        more = await asyncio.gather(*(self._account_stray(job) for job in pending if job.job_id not in skip))
        return refused + [r for r in more if r is not None]

    async def _account_stray(self, stray: StrayJobRef) -> tuple[StrayJobRef, str] | None:
        """Cancel and cost one duplicate job; the provider's refusal to answer for it, if it refuses."""
        try:
            await self._run(PollActivities.account_stray_job, stray)
        except ActivityError as exc:
            if _error_type(exc) not in BUSINESS_FAILURES:
                raise
            return stray, f"duplicate job {stray.job_id}: {_describe(exc)}"
        return None

    async def _accept_strays(self, refused: list[tuple[StrayJobRef, str]], decision: ResolveRequest) -> None:
        for stray, _ in refused:
            await self._run(PollActivities.accept_stray_cost,
                            StrayCostAcceptance(stray=stray, by=decision.by, reason=decision.reason))

    async def _return_to(self, ending: TaskEvent, decision: ResolveRequest) -> TaskEvent:
        """Out of NEEDS_ATTENTION after a decision on strays, to where `ending` applies: a paid video
        back to POST_PROCESSING (and on, maybe into REVIEW), a cancel back through
        CANCEL_REQUESTED; any other ending is a failure, which ends from NEEDS_ATTENTION itself."""
        decided = _decided(decision)
        if ending in DELIVERED:
            await self._move(TaskEvent.STRAYS_DECIDED, payload=decided)
            return ending
        if ending in (TaskEvent.CANCEL_REQUESTED, TaskEvent.CANCEL_CONFIRMED):
            await self._move(TaskEvent.CANCEL_REQUESTED, payload=decided)
            return TaskEvent.CANCEL_CONFIRMED
        return ending if ending in (TaskEvent.FINAL_FAILURE, TaskEvent.DEADLINE_PASSED) else TaskEvent.FINAL_FAILURE

    async def _abandon_open_attempts(self, *, keep_live: bool = False) -> None:
        for ref in (self._unknown, None if keep_live else self._live):
            if ref is not None:
                await self._run(SubmitActivities.abandon_attempt,
                                AttemptRef(task_id=ref.task_id, attempt_no=ref.attempt_no))
        self._unknown = None
        if not keep_live:
            self._live = None

    # -- admission ---------------------------------------------------------------------------

    async def _admit(self) -> bool:
        """Wait, QUEUED, until the provider's gate grants a slot (oldest first); False when a cancel
        came first. Waiting is a blocked workflow: it costs nothing however many tasks wait. The task
        deadline bounds the wait (the task ends EXPIRED and leaves the queue)."""
        if self._slot is not None or not self._patched(ADMISSION):
            return True
        bounded = self._patched(ADMISSION_BOUNDED)
        granted = await self._await_slot(self._task_deadline if bounded else None, reask=bounded)
        if granted is None and not self._cancel_pending():
            await self._end(TaskEvent.DEADLINE_PASSED, error="the task's deadline passed while it waited for a slot")
        return granted is not None

    async def _await_slot(self, until: datetime | None, *, reask: bool) -> SlotGrant | None:
        """Ask the gate and wait for its grant; None when a cancel came first or `until` passed (the
        request is then withdrawn). With `reask`, the request is sent again every REASK_EVERY with its
        first `requested_at`: a gate that still has it ignores it, a gate that lost it (reset,
        terminated) puts it back in its place in line."""
        self._asked_at = self._asked_at or workflow.now()
        request = SlotRequest(workflow_id=workflow.info().workflow_id, task_id=self._task_id,
                              requested_at=self._asked_at)
        while True:
            if self._paused() and not await self._wait_paused_holding_nothing(until):
                return None
            self._granted = None
            self._tell("waiting_for_slot", f"waiting for a slot at provider {self._info.provider} (in line since "
                                           f"{self._asked_at:%Y-%m-%d %H:%M:%S} UTC)")
            await self._request_slot(request)
            at_once = self._patched(GRANT_AT_ONCE)
            if self._granted is None or not at_once:
                await self._wait_for_grant(request, until, reask=reask)
            # grant-at-once-v1: a slot in the answer to an ask sent before a pause came is given back too
            kept = self._granted if at_once and self._paused() and not self._cancel_pending() else None
            if (self._granted is not None and kept is None) or not self._paused() or self._cancel_pending():
                break
            # Paused while in line: leave it (no grant comes while paused); the next ask keeps the place.
            await self._signal_gate(api.SIGNAL_GATE_RELEASE, SlotRelease(
                workflow_id=request.workflow_id, token=kept.token if kept is not None else None))
        if self._granted is None:
            await self._signal_gate(api.SIGNAL_GATE_RELEASE, SlotRelease(workflow_id=request.workflow_id))
            return None
        self._slot, self._renewed_at = self._granted, workflow.now()
        return self._slot

    async def _wait_for_grant(self, request: SlotRequest, until: datetime | None, *, reask: bool) -> None:
        """Until the gate grants, a cancel comes, `until` passes or (import-pause-v1) the import is paused."""
        while True:
            every = REASK_EVERY * workflow.random().uniform(0.8, 1.2)  # spread: tasks queued together re-ask apart
            wait = None if not reask else every if until is None else min(every, until - workflow.now())
            try:
                await workflow.wait_condition(
                    lambda: self._granted is not None or self._cancel_pending() or self._paused_by is not None,
                    timeout=wait if wait is None else max(wait, timedelta(seconds=1)))
                return
            except TimeoutError:
                if until is not None and workflow.now() >= until:
                    return
                if not await self._signal_gate(api.SIGNAL_GATE_REQUEST, request):
                    await self._request_slot(request)  # no gate runs: bring one up

    def _paused(self) -> bool:
        """The task's import is paused (import-pause-v1; runs from before the patch are never paused)."""
        return self._paused_by is not None and self._patched(IMPORT_PAUSE)

    def _pause_holds_nothing(self) -> bool:
        """Paused, on a run that holds no slot of any layer while paused (pause-holds-nothing-v1, asked
        only once a pause came: the patch's marker is in paused tasks' histories alone)."""
        return self._paused() and self._patched(PAUSE_HOLDS_NOTHING)

    async def _wait_paused_holding_nothing(self, until: datetime | None) -> bool:
        """Wait while paused, the tenant's slot given back meanwhile and asked for again after
        (pause-holds-nothing-v1); False when a cancel came or `until` passed."""
        gives_back = self._tenant_slot is not None and self._pause_holds_nothing()
        if gives_back:
            await self._give_tenant_slot()
        if not await self._wait_while_paused(until):
            return False
        if gives_back:
            await self._take_tenant_slot()
        return True

    async def _wait_while_paused(self, until: datetime | None) -> bool:
        """A paused import's task waits here holding no slot; False when a cancel came or `until` passed."""
        self._tell("paused", f"import paused by {self._paused_by}: waits for `reelqueue resume`, holding no slot",
                   waiting_for=f"paused by {self._paused_by}")
        timeout = None if until is None else max(until - workflow.now(), timedelta(seconds=1))
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(lambda: self._paused_by is None or self._cancel_pending(), timeout=timeout)
        return self._paused_by is None and not self._cancel_pending()

    async def _take_tenant_slot(self) -> None:
        """Wait, QUEUED, for one of the tenant's slots (its max_concurrent) before the provider's
        gate is asked; the task deadline bounds the wait and a cancel ends it (request withdrawn). A
        paused task waits before it asks, and a pause that finds it in line (or just granted) takes it
        out, keeping its first place for its next ask (pause-holds-nothing-v1)."""
        limit = self._info.tenant_max_concurrent
        if limit is None or self._tenant_slot is not None or not self._patched(TENANT_ADMISSION):
            return
        gate = api.tenant_gate(self._info.tenant_id)
        self._tenant_asked_at = self._tenant_asked_at or workflow.now()
        request = SlotRequest(workflow_id=workflow.info().workflow_id, task_id=self._task_id,
                              requested_at=self._tenant_asked_at)
        at_once = self._patched(GRANT_AT_ONCE)
        self._tenant_granted = None
        while not self._pause_holds_nothing() or await self._wait_while_paused(self._task_deadline):
            self._tenant_granted = None
            self._tell("waiting_for_slot", f"waiting for one of tenant {self._info.tenant_id}'s {limit} slots")
            granted = await self._run(AdmissionActivities.request_slot, AdmissionInput(
                provider=gate, request=request, plan_limits=PlanLimits(max_concurrent=limit),
                grant_signal=api.SIGNAL_TENANT_SLOT_GRANTED, at_once=at_once))
            if granted is not None:
                self._tenant_granted = granted
            if self._tenant_granted is None or not at_once:
                with contextlib.suppress(TimeoutError):
                    await workflow.wait_condition(
                        lambda: self._tenant_granted is not None or self._cancel_pending()
                        or (self._paused_by is not None and self._pause_holds_nothing()),
                        timeout=max(self._task_deadline - workflow.now(), timedelta(seconds=1)))
            if self._cancel_pending() or not (self._paused_by is not None and self._pause_holds_nothing()):
                break
            kept = self._tenant_granted  # paused: out of the line, a slot just granted given back
            self._tenant_granted = None
            await self._signal_gate(api.SIGNAL_GATE_RELEASE, SlotRelease(
                workflow_id=request.workflow_id, token=kept.token if kept is not None else None), provider=gate)
        if self._tenant_granted is None:
            await self._signal_gate(api.SIGNAL_GATE_RELEASE, SlotRelease(workflow_id=request.workflow_id),
                                    provider=gate)
            if self._cancel_pending():
                await self._end(TaskEvent.CANCEL_REQUESTED, payload=self._cancel_payload())
            await self._end(TaskEvent.DEADLINE_PASSED,
                            error="the task's deadline passed while it waited for its tenant's slot")
        self._tenant_slot = self._tenant_granted

    async def _give_tenant_slot(self) -> None:
        if self._tenant_slot is None:
            return
        release = SlotRelease(workflow_id=workflow.info().workflow_id, token=self._tenant_slot.token)
        self._tenant_slot = None
        await self._signal_gate(api.SIGNAL_GATE_RELEASE, release, provider=api.tenant_gate(self._info.tenant_id))

    async def _request_slot(self, request: SlotRequest) -> None:
        """Ask the provider's gate; with grant-at-once-v1 its answer may be the slot itself."""
        granted = await self._run(AdmissionActivities.request_slot, AdmissionInput(
            provider=self._info.provider, request=request, plan_limits=self._info.plan_limits,
            at_once=self._patched(GRANT_AT_ONCE)))
        if granted is not None:
            self._granted = granted

    async def _renew_slot(self, *, accepted: bool = False) -> None:
        if self._slot is None or not (accepted or workflow.now() - self._renewed_at >= RENEW_EVERY):
            return
        self._renewed_at = workflow.now()
        await self._signal_gate(api.SIGNAL_GATE_RENEW, SlotRenewal(
            workflow_id=workflow.info().workflow_id, token=self._slot.token, accepted=accepted))

    def _renewal_on_acceptance(self) -> dict[str, Any]:
        """What the submit step sends the gate once the provider accepted (renew-in-submit-v1)."""
        if self._slot is None or not self._patched(RENEW_IN_SUBMIT):
            return {}
        return {"gate_id": api.gate_id(self._info.provider, workflow.info().task_queue), "renewal": SlotRenewal(
            workflow_id=workflow.info().workflow_id, token=self._slot.token, accepted=True)}

    async def _report_failure(self, failure: str | None) -> None:
        """Tell the gate that the submit under the slot still held (its outcome unknown) failed."""
        if failure is None or self._slot is None or not self._patched(BREAKER):
            return
        await self._signal_gate(api.SIGNAL_GATE_RENEW, SlotRenewal(
            workflow_id=workflow.info().workflow_id, token=self._slot.token, failure=failure))

    async def _release_slot(self, *, throttled: bool = False, retry_after_s: float | None = None,
                            failure: str | None = None) -> None:
        if self._slot is None:
            return
        release = SlotRelease(workflow_id=workflow.info().workflow_id, token=self._slot.token, throttled=throttled,
                              retry_after_s=retry_after_s, failure=failure)
        self._slot = None
        await self._signal_gate(api.SIGNAL_GATE_RELEASE, release)

    async def _signal_gate(self, signal: str, message: object, *, provider: str | None = None) -> bool:
        """Tell the provider's gate (or another, e.g. the tenant's); False when no gate runs. A gate
        that is gone (terminated by hand) holds nothing to give back, and the next request starts a new one."""
        gate = api.gate_id(provider or self._info.provider, workflow.info().task_queue)
        try:
            await workflow.get_external_workflow_handle(gate).signal(signal, message)
        except ApplicationError as exc:
            workflow.logger.warning("gate %s did not take %s: %s", gate, signal, exc)
            return False
        return True

    # -- bookkeeping ------------------------------------------------------------------------

    def _track(self, job_id: str | None) -> JobRef:
        """Follow this job from now: its deadline counts from here, so queue time, retry waits and
        earlier attempts never shorten it (runs from before job-deadline-v1 count from validation)."""
        self._live = JobRef(task_id=self._task_id, attempt_no=self._attempt_no, job_id=job_id or "")
        self._tell("following_job", f"job {job_id} at {self._info.provider}: accepted", job_status="ACCEPTED")
        if self._patched(JOB_DEADLINE):
            self._deadline = workflow.now() + timedelta(seconds=self._info.deadline_s)
        return self._live

    async def _observe(self, job: JobRef, state: PollResult) -> None:
        """Remember what the provider says an attempt costs (the latest report, never a sum); a job
        that ended gives its slot back."""
        if state.cost is not None:
            self._costs[job.attempt_no] = state.cost
        self._tell("following_job", f"job {job.job_id} at {self._info.provider}: {state.raw_status}"
                   + (f", {state.progress:.0%}" if state.progress is not None else ""),
                   job_id=job.job_id, job_status=state.raw_status, progress=state.progress)
        if state.terminal and self._live is not None and self._live.job_id == job.job_id:
            self._live = None
            await self._release_slot()

    def _account_strays(self, ref: AttemptRef, job_ids: list[str]) -> None:
        """Cancel and cost each duplicate job in the background; the task ends only after."""
        for job_id in job_ids:
            stray = StrayJobRef(task_id=ref.task_id, attempt_no=ref.attempt_no, job_id=job_id)
            accounting = (self._account_stray(stray) if self._patched(STRAYS)
                          else self._run(PollActivities.account_stray_job, stray))
            self._strays.append(asyncio.create_task(accounting))

    def _cost(self) -> float:
        return round(sum(self._costs.values()), 6)

    def _cancel_pending(self) -> bool:
        return self._cancel is not None and not self._cancel_handled

    def _cancel_payload(self) -> dict:
        self._cancel_handled = True
        return {"reason": self._cancel.reason, "by": self._cancel.requested_by}

    async def _move(self, event: TaskEvent, *, error: str | None = None, error_class: str | None = None,
                    payload: dict | None = None, cancel_outcome: str | None = None,
                    next_retry_at: datetime | None = None, prompt_override: str | None = None,
                    deadline_at: datetime | None = None) -> TransitionResult:
        return await self._record(self._request(
            event, error=error, error_class=error_class, payload=payload, cancel_outcome=cancel_outcome,
            next_retry_at=next_retry_at, prompt_override=prompt_override, deadline_at=deadline_at))

    def _request(self, event: TaskEvent, *, payload: dict | None = None, **fields: Any) -> TransitionInput:
        """The next move this run decides, with its source id (its place in the run's sequence)."""
        self._seq += 1
        return TransitionInput(
            task_id=self._task_id, event=event,
            source_event_id=f"{self._task_id}{run_suffix(self._run_no)}:{self._seq}:{event.value}",
            attempt_no=self._attempt_no or None, payload=payload or {}, **fields)

    async def _record(self, req: TransitionInput) -> TransitionResult:
        """A move on its own: the record_transition local activity."""
        result: TransitionResult = await workflow.execute_local_activity_method(
            TaskActivities.record_transition, req,
            start_to_close_timeout=timedelta(seconds=15),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=30)),
        )
        return self._moved(req.event, result)

    async def _carried(self, moves: list[TransitionInput], results: list[TransitionResult]) -> list[TransitionResult]:
        """Moves an activity committed with its own write (transition-in-work-v1), taken in as if
        recorded one by one; those it did not get to (after one the table refused) are recorded on
        their own, as they would have been."""
        taken = [self._moved(req.event, result) for req, result in zip(moves, results, strict=False)]
        for req in moves[len(results):]:
            taken.append(await self._record(req))
        return taken

    def _offer(self, event: TaskEvent, *, payload: dict | None = None, **fields: Any) -> TransitionInput:
        """A move a step commits only for one of its outcomes (transition-in-work-v2), numbered as the
        next of the run's sequence; only `_take` uses the number up (offers for exclusive outcomes share it)."""
        req = self._request(event, payload=payload, **fields)
        self._seq -= 1
        return req

    async def _take(self, req: TransitionInput, results: list[TransitionResult]) -> TransitionResult:
        """An offered move, now that the step's outcome calls for it: as the step committed it, or
        recorded on its own when the step did not (an activity worker from before transition-in-work-v2)."""
        self._seq += 1
        return self._moved(req.event, results[0]) if results else await self._record(req)

    def _moved(self, event: TaskEvent, result: TransitionResult) -> TransitionResult:
        """What a recorded move changes here: the status, its search attribute, and a takeover."""
        if result.status is not self._status:
            self._status = result.status
            self._show_status(result.status)
            self._details.status = result.status.value
            self._publish()
        if not result.applied:
            workflow.logger.warning("task %s: %s not applied, task is %s", self._task_id, event.value, result.status)
            if result.status in TERMINAL:
                raise TaskTakenOver(result.status)
        return result

    def _patched(self, patch: str) -> bool:
        """`workflow.patched`, answered without a marker for the patches the run's baseline stands for."""
        return patch in self._implied or workflow.patched(patch)

    def _show_status(self, status: TaskStatus) -> None:
        """Mirror the status into the TaskStatus search attribute, only when the value users filter on
        changes (coarse-status-v1); before it, the exact status at every change (called on a change)."""
        shown = shown_status(status) if self._patched(COARSE_STATUS) else status.value
        if shown != self._shown:
            self._shown = shown
            workflow.upsert_search_attributes([TASK_STATUS.value_set(shown)])

    async def _run(self, step: Callable[..., Any], arg: Any) -> Any:
        start_to_close, retry, heartbeat = _STEPS[step]
        while True:
            try:
                return await workflow.execute_activity_method(
                    step, arg, start_to_close_timeout=start_to_close, retry_policy=retry, heartbeat_timeout=heartbeat,
                    task_queue=queue_of(step.__name__, TASK_QUEUES, self._patched), summary=_summary(step, arg),
                    priority=self._priority(step),
                )
            except ActivityError as exc:
                if not self._waits_for_dependency(step, exc):
                    raise
            self._tell("waiting", f"{step.__name__} waits for Postgres or object storage to come back")
            await self._pause(DEPENDENCY_PAUSE_S, wake_on_cancel=False)

    def _priority(self, step: Callable[..., Any]) -> Priority:
        """An output's fetch is dispatched by how soon its provider URL expires (expiry-first-v1), worked
        out at each run: after a wait for storage, the one whose URL is closest to expiring goes first."""
        if step != FetchActivities.fetch_output or self._output_expires is None:
            return Priority.default
        if not self._patched(EXPIRY_FIRST):
            return Priority.default
        return fetch_priority(self._output_expires, workflow.now())

    def _waits_for_dependency(self, step: Callable[..., Any], exc: ActivityError) -> bool:
        """A step that ran out of tries because Postgres or object storage was out of reach (or the
        ledger refused writes) is run again, not failed: the outage costs the task time, not its
        attempts (degradation-v1). Status calls keep their own outage handling (`_follow`); the task's
        deadline still ends the wait."""
        if _error_type(exc) != DEPENDENCY_UNAVAILABLE or step == PollActivities.poll_job:
            return False
        if self._task_deadline is not None and workflow.now() >= self._task_deadline:
            return False
        return self._patched(DEGRADATION)

    # -- live details ------------------------------------------------------------------------

    def _tell(self, step: str, text: str, **fields: Any) -> None:
        """What the task does now, for the `details` query and the Web UI's current details (neither
        is in the history: no command changes)."""
        job = self._live.job_id if self._live is not None else None
        self._details = LiveDetails(**{
            "status": self._status.value, "step": step, "text": text[:400], "since": workflow.now(),
            "provider": self._info.provider if self._info else None, "attempt_no": self._attempt_no or None,
            "job_id": job or None, **fields})
        self._publish()

    def _publish(self) -> None:
        d = self._details
        lines = [f"**{d.status}** · {d.text}"]
        if d.job_id:
            progress = f" · {d.progress:.0%}" if d.progress is not None else ""
            lines.append(f"job `{d.job_id}` (attempt {d.attempt_no}) {d.job_status or ''}{progress}")
        workflow.set_current_details("\n\n".join(lines))


def _summary(step: Callable[..., Any], arg: Any) -> str:
    """The line the Web UI shows for an activity call: the step, and the attempt and job it is about."""
    parts = [step.__name__]
    for field, label in (("attempt_no", "attempt"), ("job_id", "job")):
        value = getattr(arg, field, None)
        if value:
            parts.append(f"{label} {value}")
    return " · ".join(parts)


def _decided(decision: ResolveRequest) -> dict:
    """A person's decision as a state event's payload: what, who and why."""
    return {"decision": decision.action.value, "by": decision.by, "reason": decision.reason}


def _error_type(exc: ActivityError) -> str | None:
    return exc.cause.type if isinstance(exc.cause, ApplicationError) else None


def _describe(exc: ActivityError) -> str:
    cause = exc.cause
    if isinstance(cause, ApplicationError):
        return f"{cause.type or 'error'}: {cause.message}"
    return str(cause or exc)
