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
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.errors import INSUFFICIENT_CREDIT
    from activities.ledger import LedgerActivities
    from activities.prepare import PrepareActivities
    from activities.tasks import TaskActivities
    from contracts import workflow_api as api
    from contracts.admission import SlotGrant
    from contracts.messages import (
        CancelRequest,
        GenerationInput,
        GenerationOutcome,
        LiveDetails,
        PauseRequest,
        ProviderUpdate,
        ResolveAction,
        ResolveRequest,
        ResolveResult,
        ReviewAction,
        ReviewRequest,
        ReviewResult,
        TaskInfo,
        TaskRef,
    )
    from contracts.task import TaskEvent, TaskStatus

    # The parts hold no state of their own (it is the run's, in RunState): imported once, not per run.
    from workflows.generation.admission import Admission
    from workflows.generation.attempts import Attempts
    from workflows.generation.attention import Attention
    from workflows.generation.closing import Closing
    from workflows.generation.delivery import Delivery
    from workflows.generation.following import Following
    from workflows.generation.patches import (
        ADMISSION_BOUNDED,
        BASELINES,
        LEAN_PATH,
        STALE_GRANT,
        STALE_LAYER_GRANT,
        STALE_LAYER_RECHECK,
        STALE_TENANT_GRANT,
        TRANSITIONS_CARRIED,
        TRANSITIONS_IN_WORK,
    )
    from workflows.generation.review import Review
    from workflows.generation.routing import Routing
    from workflows.generation.state import TaskEnded, TaskTakenOver
    from workflows.generation.steps import MAX_PAID_ATTEMPTS, describe, error_type
    from workflows.generation.strays import STRAY, Strays


# Task statuses a workflow closes as Failed with (the task's reason), so the Web UI shows them.
FAILED_CLOSE = frozenset({TaskStatus.FAILED_FINAL, TaskStatus.EXPIRED, TaskStatus.INVALID})


@workflow.defn(name=api.WORKFLOW_NAME)
class GenerationWorkflow(Admission, Routing, Attempts, Following, Delivery, Review, Attention, Strays, Closing):
    """One task's run: its steps (`_produce`: validate and reserve, generate, deliver), then the messages
    it takes; each part it is made of decides one thing (docs/architecture.md)."""

    # -- the steps ---------------------------------------------------------------------------

    @workflow.run
    async def run(self, inp: GenerationInput) -> GenerationOutcome:
        self._task_id, self._run_no = inp.task_id, inp.run
        self._shown = workflow.memo_value(api.MEMO_SHOWN_STATUS, None, type_hint=str)  # what the starter set
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
                await self._end(TaskEvent.FINAL_FAILURE, error=describe(exc), error_class="activity_failed")

    async def _validate_and_reserve(self) -> None:
        self._tell("validating", "checking the inputs and reserving credit")
        if self._patched(LEAN_PATH):
            return await self._prepare()
        await self._move(TaskEvent.VALIDATION_STARTED)
        checked = await self._run(TaskActivities.validate_task, TaskRef(task_id=self._task_id, run=self._run_no))
        self._learn(checked.info)
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
            if error_type(exc) != INSUFFICIENT_CREDIT:
                raise
            await self._end(TaskEvent.FINAL_FAILURE, error=describe(exc), error_class="credit")
        if in_work:
            await self._carried(moves, reserved.moved)
            return
        await self._move(TaskEvent.VALIDATION_PASSED)
        bounded = self._patched(ADMISSION_BOUNDED)
        await self._move(TaskEvent.QUEUED, deadline_at=self._task_deadline if bounded else None)

    async def _prepare(self) -> None:
        """lean-path-v1: validation, the credit hold and the moves to QUEUED in one step."""
        moves = [self._request(TaskEvent.VALIDATION_STARTED), self._request(TaskEvent.VALIDATION_PASSED),
                 self._request(TaskEvent.QUEUED)]
        prepared = await self._run(PrepareActivities.prepare_task,
                                   TaskRef(task_id=self._task_id, run=self._run_no, moves=moves))
        self._learn(prepared.info, prepared.task_deadline_at)
        await self._carried(moves[:len(prepared.moved)], prepared.moved)  # what the step committed, no more
        if not prepared.ok:
            await self._end(TaskEvent.VALIDATION_FAILED, error=prepared.reason, error_class="invalid_input")
        if prepared.credit_short is not None:
            await self._end(TaskEvent.FINAL_FAILURE, error=f"{INSUFFICIENT_CREDIT}: {prepared.credit_short}",
                            error_class="credit")
        if len(prepared.moved) < len(moves):  # a move was refused: the task is someone else's now
            raise TaskTakenOver(self._status)

    def _learn(self, info: TaskInfo, task_deadline: datetime | None = None) -> None:
        """What validation read of the task: its facts, its pause, its attempt numbering and deadlines."""
        self._info = info
        if not self._pause_told:
            self._paused_by = info.paused_by
        self._attempt_no = info.current_attempt_no  # a re-driven task continues its numbering
        self._deadline = workflow.now() + timedelta(seconds=info.deadline_s)
        self._task_deadline = task_deadline or workflow.now() + timedelta(seconds=info.task_deadline_s)

    def _close(self) -> GenerationOutcome:
        """How the workflow itself closes: Canceled / Failed (with the task's reason) / Completed."""
        if self._status is TaskStatus.CANCELED and self._cancelled_in_temporal:
            raise asyncio.CancelledError(self._error or "canceled")
        if self._status in FAILED_CLOSE:
            raise ApplicationError(f"{self._status.value}: {self._error}", type=self._status.value,
                                   non_retryable=True)
        return GenerationOutcome(task_id=self._task_id, status=self._status, attempts=self._attempt_no,
                                 cost=self._cost(), error=self._error)

    # -- messages ----------------------------------------------------------------------------

    @workflow.signal(name=api.SIGNAL_CANCEL)
    def cancel(self, request: CancelRequest) -> None:
        self._cancel = self._cancel or request

    @workflow.signal(name=api.SIGNAL_PAUSE)
    def pause(self, request: PauseRequest) -> None:
        self._pause_told = True
        self._paused_by = request.by if request.paused else None

    @workflow.signal(name=api.SIGNAL_SLOT_GRANTED)
    def slot_granted(self, grant: SlotGrant) -> None:
        # A grant of the slot this run last gave back may be stale (sent again to a holder that asked
        # again, landing after the release): not taken; the gate's answer to an ask decides (stale-grant-v1).
        if grant.token == self._given_back and self._patched(STALE_GRANT):
            self._recheck = True
            return
        self._granted = grant

    @workflow.signal(name=api.SIGNAL_TENANT_SLOT_GRANTED)
    def tenant_slot_granted(self, grant: SlotGrant) -> None:
        if grant.token == self._tenant_given_back and self._patched(STALE_TENANT_GRANT):
            return  # a grant of the slot given back on a pause, landing late: the gate no longer counts it
        self._tenant_granted = grant

    @workflow.signal(name=api.SIGNAL_MODEL_SLOT_GRANTED)
    def model_slot_granted(self, grant: SlotGrant) -> None:
        self._layer_grant(grant, api.model_gate(self._info.provider, self._info.model))  # the route's model

    @workflow.signal(name=api.SIGNAL_PLATFORM_SLOT_GRANTED)
    def platform_slot_granted(self, grant: SlotGrant) -> None:
        self._layer_grant(grant, api.PLATFORM_GATE)

    def _layer_grant(self, grant: SlotGrant, gate: str) -> None:
        """A layer gate's grant, kept for the gate that sent it; one of the slot given back there, landing
        late, is not a slot (stale-layer-grant-v1)."""
        if self._patched(STALE_LAYER_GRANT):
            gate = grant.gate or gate
            if grant.token == self._layer_given_back.get(gate):
                if self._patched(STALE_LAYER_RECHECK):
                    self._layer_recheck.add(gate)  # asked again: a gate that restarted its tokens answers with it
                return
        self._layer_granted[gate] = grant

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
