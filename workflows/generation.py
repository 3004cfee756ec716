"""GenerationWorkflow: one durable workflow per video task. Orchestration only.

Activities are called by name, so this module imports nothing that does I/O. Every status change
goes through the `record_transition` local activity (the state machine in Postgres) and is
mirrored into the TaskStatus search attribute for the Web UI.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from schema.contracts import (
        AssetRef,
        AttemptRef,
        CancelRequest,
        GenerationInput,
        GenerationOutcome,
        JobRef,
        LedgerResult,
        PollResult,
        ProviderUpdate,
        ReconcileResult,
        ReleaseInput,
        SettleInput,
        SubmitActivityResult,
        TaskInfo,
        TaskRef,
        TranscodeInput,
        TranscodeResult,
        TransitionInput,
        TransitionResult,
        ValidationResult,
    )
    from schema.state_machine import TaskEvent as E
    from schema.state_machine import TaskStatus as S
    from workflows.search_attributes import TASK_STATUS

MAX_SUBMITS = 3
MAX_POLL_INTERVAL_S = 15.0
RETRY_BACKOFF_S = (5.0, 20.0, 60.0)



def _retry(attempts: int | None, *, first_s: float = 1.0, max_s: float = 30.0) -> RetryPolicy:
    """Exponential backoff capped at `max_s`; `attempts` None = until the step succeeds."""
    return RetryPolicy(initial_interval=timedelta(seconds=first_s), maximum_interval=timedelta(seconds=max_s),
                       maximum_attempts=attempts or 0)


# Activities raise non-retryable ApplicationErrors for business failures, so these budgets are
# for infrastructure trouble (database, storage or provider briefly away): about 8 minutes each
# with 20 attempts, more for steps that only read or record.
_POLICIES: dict[str, tuple[timedelta, RetryPolicy, timedelta | None]] = {
    # name: (start_to_close, retry policy, heartbeat timeout)
    "validate_task": (timedelta(seconds=30), _retry(20), None),
    "reserve_credit": (timedelta(seconds=30), _retry(20), None),
    # A re-run of submit never sends twice (the attempt row says SENDING -> unknown outcome).
    "submit": (timedelta(seconds=30), _retry(20), None),
    "reconcile_submit": (timedelta(seconds=30), _retry(40, first_s=2.0), None),
    "poll_job": (timedelta(seconds=15), _retry(30), None),
    "cancel_job": (timedelta(seconds=15), _retry(10), None),
    "fetch_output": (timedelta(minutes=10), _retry(8), timedelta(seconds=30)),
    "transcode": (timedelta(minutes=15), _retry(6), timedelta(seconds=60)),
    "settle": (timedelta(seconds=30), _retry(None), None),
    "release_credit": (timedelta(seconds=30), _retry(None), None),
}


class TaskEnded(Exception):
    """Internal: the task reached a status where this workflow has nothing more to do."""


@workflow.defn(name="GenerationWorkflow")
class GenerationWorkflow:
    def __init__(self) -> None:
        self._task_id = ""
        self._status = S.CREATED.value
        self._seq = 0
        self._cancel: CancelRequest | None = None
        self._cancel_sent = False
        self._wake = False
        self._cost = 0.0
        self._attempt_no = 0
        self._job: JobRef | None = None

    @workflow.signal(name="cancel")
    def cancel(self, request: CancelRequest) -> None:
        self._cancel = self._cancel or request

    @workflow.signal(name="provider_update")
    def provider_update(self, update: ProviderUpdate) -> None:
        self._wake = True

    @workflow.query(name="status")
    def status(self) -> str:
        return self._status

    @workflow.run
    async def run(self, inp: GenerationInput) -> GenerationOutcome:
        self._task_id = inp.task_id
        error: str | None = None
        try:
            await self._pipeline()
        except TaskEnded as ended:
            error = str(ended) or None
        except (ActivityError, asyncio.CancelledError) as exc:
            if is_cancelled_exception(exc):
                # Cancelled from Temporal (Web UI, `temporal workflow cancel`); it arrives as an
                # ActivityError when an activity was running. Leave the facts true before the
                # workflow closes, so Postgres never shows a task as running forever.
                await self._record_hard_cancel()
                raise asyncio.CancelledError() from exc
            error = _describe(exc)
            await self._move(E.FINAL_FAILURE, error=error, error_class="activity_failed")
            await self._close_ledger()
        return GenerationOutcome(task_id=self._task_id, status=self._status, attempts=self._attempt_no,
                                 cost=self._cost, error=error)

    async def _pipeline(self) -> None:
        await self._move(E.VALIDATION_STARTED)
        checked: ValidationResult = await self._call("validate_task", TaskRef(task_id=self._task_id),
                                                     ValidationResult)
        if not checked.ok:
            await self._move(E.VALIDATION_FAILED, error=checked.reason, error_class="invalid_input")
            raise TaskEnded(checked.reason)
        info = checked.info
        try:
            await self._call("reserve_credit", TaskRef(task_id=self._task_id), LedgerResult)
        except ActivityError as exc:
            await self._move(E.FINAL_FAILURE, error=_describe(exc), error_class="credit")
            raise TaskEnded(_describe(exc)) from exc
        await self._move(E.VALIDATION_PASSED)
        await self._move(E.QUEUED)
        job = await self._dispatch_until_done(info)
        raw: AssetRef = await self._call("fetch_output", job, AssetRef)
        await self._move(E.OUTPUT_PERSISTED, payload={"raw_key": raw.key, "sha256": raw.sha256})
        media: TranscodeResult = await self._call(
            "transcode", TranscodeInput(task_id=self._task_id, raw_asset_id=raw.asset_id), TranscodeResult
        )
        await self._call("settle", SettleInput(task_id=self._task_id, attempt_no=job.attempt_no, cost=self._cost),
                         LedgerResult)
        await self._move(E.PLAYABLE_ASSET_READY, payload={"proxy": media.proxy.key},
                         cancel_outcome="TOO_LATE" if self._cancel else None)

    async def _dispatch_until_done(self, info: TaskInfo) -> JobRef:
        """Submit attempts until one job succeeds; every other ending raises TaskEnded."""
        while True:
            if self._cancel is not None:
                await self._move(E.CANCEL_REQUESTED, payload={"reason": self._cancel.reason})
                await self._close_ledger()
                raise TaskEnded("canceled before dispatch")
            if self._attempt_no >= MAX_SUBMITS:
                await self._move(E.FINAL_FAILURE, error=f"no success after {MAX_SUBMITS} submits",
                                 error_class="retry_budget")
                await self._close_ledger()
                raise TaskEnded("retry budget exhausted")
            self._attempt_no += 1
            ref = AttemptRef(task_id=self._task_id, attempt_no=self._attempt_no)
            await self._move(E.DISPATCH_CLAIMED)
            job_id = await self._submit(ref)
            if job_id is None:
                continue
            job = self._job = JobRef(task_id=self._task_id, attempt_no=self._attempt_no, job_id=job_id)
            final = await self._follow(job, info)
            if final.status == "succeeded":
                return job
            if final.status == "canceled" or self._cancel_sent:
                await self._move(E.CANCEL_CONFIRMED, payload={"provider_status": final.raw_status})
                await self._close_ledger()
                raise TaskEnded("canceled")
            if final.error_class in ("moderation", "non_retryable"):
                await self._move(E.FINAL_FAILURE, error=final.error, error_class=final.error_class)
                await self._close_ledger()
                raise TaskEnded(final.error)
            await self._retry_wait(final.error or f"provider job {final.raw_status}", final.error_class)

    async def _submit(self, ref: AttemptRef) -> str | None:
        """One submit; returns the job id, or None after moving the task back to QUEUED."""
        result: SubmitActivityResult = await self._call("submit", ref, SubmitActivityResult)
        if result.outcome == "accepted":
            await self._move(E.PROVIDER_ACCEPTED, payload={"job_id": result.job_id})
            return result.job_id
        if result.outcome == "unknown":
            await self._move(E.SUBMIT_AMBIGUOUS, error=result.error, error_class="unknown_outcome")
            found: ReconcileResult = await self._call("reconcile_submit", ref, ReconcileResult)
            if found.found:
                await self._move(E.PROVIDER_JOB_FOUND, payload={"job_id": found.job_id,
                                                                "duplicates": found.duplicates})
                return found.job_id
            await self._move(E.CONFIRMED_NOT_CREATED)
            await self._sleep_then_requeue(None)
            return None
        if result.outcome == "rejected_retryable":
            await self._retry_wait(result.error or "provider refused the submit", result.error_class,
                                   result.retry_after_s)
            return None
        await self._move(E.FINAL_FAILURE, error=result.error, error_class=result.error_class)
        await self._close_ledger()
        raise TaskEnded(result.error)

    async def _follow(self, job: JobRef, info: TaskInfo) -> PollResult:
        """Poll with an adaptive, jittered interval; a webhook signal wakes the wait early."""
        interval = max(info.min_poll_interval_s, 1.0)
        deadline = workflow.now() + timedelta(seconds=info.deadline_s)
        while True:
            if self._cancel is not None and not self._cancel_sent:
                await self._move(E.CANCEL_REQUESTED, payload={"reason": self._cancel.reason})
                self._cancel_sent = True
                await self._call("cancel_job", job, PollResult)
            polled: PollResult = await self._call("poll_job", job, PollResult)
            if polled.status == "running" and self._status == S.SUBMITTED:
                await self._move(E.PROVIDER_RUNNING)
            if polled.status in ("succeeded", "failed", "canceled", "expired"):
                self._cost += polled.cost or 0.0
                if polled.status == "succeeded":
                    if self._cancel_sent:
                        await self._move(E.COMPLETION_WON, cancel_outcome="TOO_LATE")
                    else:
                        await self._move(E.PROVIDER_SUCCEEDED)
                return polled
            if workflow.now() >= deadline:
                await self._call("cancel_job", job, PollResult)
                await self._move(E.DEADLINE_PASSED, error="provider job did not finish before the deadline")
                await self._close_ledger()
                raise TaskEnded("deadline passed")
            self._wake = False
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(
                    lambda: self._wake or (self._cancel is not None and not self._cancel_sent),
                    timeout=timedelta(seconds=interval * workflow.random().uniform(0.8, 1.2)),
                )
            interval = min(interval * 1.5, MAX_POLL_INTERVAL_S)

    async def _record_hard_cancel(self) -> None:
        reason = {"reason": "workflow cancelled in Temporal"}
        if self._job is not None and self._status not in (S.OUTPUT_FETCHING, S.POST_PROCESSING):
            stopped: PollResult = await self._call("cancel_job", self._job, PollResult)
            self._cost += stopped.cost or 0.0
        await self._move(E.CANCEL_REQUESTED, payload=reason)
        if self._status == S.CANCEL_REQUESTED:
            await self._move(E.CANCEL_CONFIRMED, payload=reason)
        await self._close_ledger()

    async def _retry_wait(self, error: str, error_class: str | None, delay_s: float | None = None) -> None:
        await self._move(E.RETRYABLE_FAILURE, error=error, error_class=error_class or "retryable")
        await self._sleep_then_requeue(delay_s)

    async def _sleep_then_requeue(self, delay_s: float | None) -> None:
        backoff = RETRY_BACKOFF_S[min(self._attempt_no, len(RETRY_BACKOFF_S)) - 1]
        delay = max(delay_s or 0.0, backoff) * workflow.random().uniform(0.9, 1.1)
        with contextlib.suppress(TimeoutError):  # a cancel during the wait ends it at once
            await workflow.wait_condition(lambda: self._cancel is not None, timeout=timedelta(seconds=delay))
        await self._move(E.RETRY_DUE)

    async def _close_ledger(self) -> None:
        """Settle whatever providers charged (possibly nothing) and release the rest."""
        if self._cost > 0:
            await self._call("settle", SettleInput(task_id=self._task_id, attempt_no=self._attempt_no or None,
                                                   cost=self._cost), LedgerResult)
        else:
            await self._call("release_credit", ReleaseInput(task_id=self._task_id, reason=self._status.lower()),
                             LedgerResult)

    async def _move(
        self,
        event: E,
        *,
        error: str | None = None,
        error_class: str | None = None,
        payload: dict | None = None,
        cancel_outcome: str | None = None,
    ) -> TransitionResult:
        self._seq += 1
        result: TransitionResult = await workflow.execute_local_activity(
            "record_transition",
            TransitionInput(
                task_id=self._task_id, event=event, source_event_id=f"{self._task_id}:{self._seq}:{event.value}",
                attempt_no=self._attempt_no or None, payload=payload or {}, error=error, error_class=error_class,
                cancel_outcome=cancel_outcome,
            ),
            result_type=TransitionResult,
            start_to_close_timeout=timedelta(seconds=15),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=30)),
        )
        if result.status != self._status:
            self._status = result.status
            workflow.upsert_search_attributes([TASK_STATUS.value_set(result.status)])
        return result

    async def _call(self, name: str, arg: object, result_type: type):  # noqa: ANN202
        start_to_close, retry, heartbeat = _POLICIES[name]
        return await workflow.execute_activity(
            name, arg, result_type=result_type, start_to_close_timeout=start_to_close, retry_policy=retry,
            heartbeat_timeout=heartbeat,
        )


def _describe(exc: ActivityError) -> str:
    cause = exc.cause
    if isinstance(cause, ApplicationError):
        return f"{cause.type or 'error'}: {cause.message}"
    return str(cause or exc)
