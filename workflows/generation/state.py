"""What a run knows about its task, and the ways every part acts on it: a move (`_move`, the only
way a status changes), a step (`_run`, by the step table), a wait, the live details."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import Priority, RetryPolicy
from temporalio.exceptions import ActivityError, FailureError

with workflow.unsafe.imports_passed_through():
    from activities.errors import DEPENDENCY_UNAVAILABLE
    from activities.fetch import FetchActivities
    from activities.poll import PollActivities
    from activities.tasks import TaskActivities
    from contracts.admission import SlotGrant
    from contracts.messages import (
        AttemptRef,
        CancelRequest,
        JobRef,
        LiveDetails,
        ResolveRequest,
        ReviewRequest,
        TaskInfo,
        TransitionInput,
        TransitionResult,
        run_suffix,
    )
    from contracts.task import TaskEvent, TaskStatus
    from schema.state_machine import TERMINAL
    from workflows.observations import Inbox
    from workflows.queues import fetch_priority, queue_of
    from workflows.search_attributes import TASK_STATUS, shown_status

from workflows.generation.patches import COARSE_STATUS, DEGRADATION, EXPIRY_FIRST, LOCAL_DB_STEPS, TASK_QUEUES
from workflows.generation.steps import (
    DEPENDENCY_PAUSE_S,
    LOCAL_RETRY_THRESHOLD,
    LOCAL_STEPS,
    STEPS,
    error_type,
    summary,
)


class TaskEnded(Exception):
    """Internal: the task reached a status where this workflow has nothing more to do."""


class TaskTakenOver(Exception):
    """Internal: a transition was not applied because someone else changed the task."""


class RunState:
    """What the run knows (all of the task's state lives here; the parts read and change it through
    `self`) and the primitives they share: moves (`_move`; `_offer`/`_take` for a move a step commits),
    steps (`_run`), waits (`_pause`), live details (`_tell`)."""

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
        self._given_back: int | None = None  # the token of the provider gate's slot this run last gave back
        self._tenant_given_back: int | None = None  # and of the tenant gate's slot
        self._recheck = False  # stale-grant-v1: a grant naming that token came; the gate is asked again
        self._layer_slots: dict[str, SlotGrant] = {}  # admission-layers-v1: gate name -> the slot held there
        self._layer_granted: dict[str, SlotGrant | None] = {}  # gate name -> a grant come as a signal
        self._layer_asked_at: dict[str, Any] = {}  # gate name -> when this task first asked it (its place)
        self._layer_given_back: dict[str, int] = {}  # gate name -> the token of the slot last given back there
        self._layer_recheck: set[str] = set()  # stale-layer-recheck-v1: gates to ask whether a grant is ours
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
        self._checks_regenerated = False  # checks-gate-success-v1: the one regeneration after failed checks made
        self._paused_by: str | None = None  # import-pause-v1: who paused the task's import
        self._pause_told = False  # a pause/resume signal came: it outranks what validation read
        self._details = LiveDetails(status=TaskStatus.CREATED.value, step="starting", text="starting")
        self._implied: frozenset[str] = frozenset()  # patches the run's baseline stands for (BASELINES)
        self._carry = False  # transition-in-work-v2: the main line's moves ride on its steps
        self._shown: str | None = None  # coarse-status-v1: the TaskStatus search attribute's last upsert
        self._route_note: str | None = None  # route-fallback-v1: the route chosen for the next attempt, and why
        self._route_pinned = False  # a job of the task may exist on its route (an accepted duplicate risk)
        self._rerouted = False  # the task left a gate's line for another route
        self._look_every: timedelta | None = None  # route-look-v1: the spacing of a waiting task's looks at its routes
        self._asked_gate_at: datetime | None = None  # route-look-v1: when the task last asked its provider's gate
        self._waiting_since: datetime | None = None  # since when the task waits for a provider's slot (across routes)
        self._long_waiting = False  # long-wait-spacing-v1: it has waited LONG_WAIT, and wakes less often

    def _cancel_pending(self) -> bool:
        return self._cancel is not None and not self._cancel_handled

    def _cancel_payload(self) -> dict:
        self._cancel_handled = True
        return {"reason": self._cancel.reason, "by": self._cancel.requested_by}

    def _cost(self) -> float:
        return round(sum(self._costs.values()), 6)

    def _patched(self, patch: str) -> bool:
        """`workflow.patched`, answered without a marker for the patches the run's baseline stands for."""
        return patch in self._implied or workflow.patched(patch)

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

    def _show_status(self, status: TaskStatus) -> None:
        """Mirror the status into the TaskStatus search attribute, only when the value users filter on
        changes (coarse-status-v1); before it, the exact status at every change (called on a change)."""
        shown = shown_status(status) if self._patched(COARSE_STATUS) else status.value
        if shown != self._shown:
            self._shown = shown
            workflow.upsert_search_attributes([TASK_STATUS.value_set(shown)])

    async def _run(self, step: Callable[..., Any], arg: Any) -> Any:
        start_to_close, retry, heartbeat = STEPS[step]
        while True:
            try:
                if step in LOCAL_STEPS and self._patched(LOCAL_DB_STEPS):
                    return await self._run_local(step, arg)
                return await workflow.execute_activity_method(
                    step, arg, start_to_close_timeout=start_to_close, retry_policy=retry, heartbeat_timeout=heartbeat,
                    task_queue=queue_of(step.__name__, TASK_QUEUES, self._patched), summary=summary(step, arg),
                    priority=self._priority(step),
                )
            except ActivityError as exc:
                if not self._waits_for_dependency(step, exc):
                    raise
            self._tell("waiting", f"{step.__name__} waits for Postgres or object storage to come back")
            await self._pause(DEPENDENCY_PAUSE_S, wake_on_cancel=False)

    async def _run_local(self, step: Callable[..., Any], arg: Any) -> Any:
        """A step as a local activity (local-db-steps-v1), by the step table. Its failure arrives as the
        step's own error, unwrapped: raised as an activity's failure is, so every caller handles both alike."""
        start_to_close, retry, _ = STEPS[step]
        try:
            return await workflow.execute_local_activity_method(
                step, arg, start_to_close_timeout=start_to_close, retry_policy=retry,
                local_retry_threshold=LOCAL_RETRY_THRESHOLD, summary=summary(step, arg))
        except ActivityError:
            raise
        except FailureError as failure:  # ApplicationError, a timeout, a cancel
            raise ActivityError(f"local activity {step.__name__} failed", scheduled_event_id=0, started_event_id=0,
                                identity="", activity_type=step.__name__, activity_id="",
                                retry_state=None) from failure

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
        if error_type(exc) != DEPENDENCY_UNAVAILABLE or step == PollActivities.poll_job:
            return False
        if self._task_deadline is not None and workflow.now() >= self._task_deadline:
            return False
        return self._patched(DEGRADATION)

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
