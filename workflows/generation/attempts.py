"""Attempts: submit until a job succeeds. Each submit, the reconcile of an unknown outcome (never a
second send), and the wait before the next attempt."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.errors import BUSINESS_FAILURES, DISPATCH_NOT_CLAIMED, TASK_NOT_FOUND
    from activities.submit import SubmitActivities
    from contracts.messages import AttemptRef, JobRef, ReconcileOutcome, ResolveAction, SubmitActivityResult
    from contracts.provider import ErrorClass, JobStatus, SubmitOutcome
    from contracts.task import TaskEvent

from workflows.generation.patches import ACCEPTED_RISK_ENDS, BREAKER, CANCEL_BEFORE_SUBMIT, JOB_DEADLINE, WEBHOOKS
from workflows.generation.state import RunState
from workflows.generation.steps import MAX_PAID_ATTEMPTS, RETRY_BACKOFF_S, describe, error_type


class Attempts(RunState):
    """Paid attempts until a job succeeds (`_generate`): each under a slot, submitted once, an unknown
    outcome reconciled before anything is sent again, a refusal or a failed job waited out; the job
    is followed by `Following._follow`."""

    async def _generate(self) -> JobRef:
        """Submit attempts until a job succeeds, holding a slot of the task's tenant throughout
        (tenant-admission-v1) and of its model (admission-layers-v1); every other ending raises TaskEnded."""
        await self._take_task_slots()
        try:
            return await self._attempts()
        finally:
            await self._give_task_slots()

    async def _attempts(self) -> JobRef:
        while True:
            if self._cancel_pending():
                await self._end(TaskEvent.CANCEL_REQUESTED, payload=self._cancel_payload())
            if self._paid >= MAX_PAID_ATTEMPTS:
                await self._end(TaskEvent.FINAL_FAILURE, error=f"no success after {self._paid} paid attempts",
                                error_class="retry_budget")
            if workflow.now() >= self._task_deadline:
                await self._end(TaskEvent.DEADLINE_PASSED, error="the task's deadline passed before a job succeeded")
            if self._slot is None and self._routable():
                self._rerouted = False
                await self._route()
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
                                                route_note=self._route_note, **self._renewal_on_acceptance()))
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
        self._tell("submitting", f"submitting attempt {ref.attempt_no} to {self._info.provider}/{self._info.model}")
        try:
            sent = await self._send(ref)
        except ActivityError as exc:  # out of budget: the call may have gone out, so ask, never resend
            if error_type(exc) in BUSINESS_FAILURES:
                raise
            outcome, error, error_class, retry_after = SubmitOutcome.UNKNOWN, describe(exc), None, None
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
            if not ref.moves or error_type(exc) != DISPATCH_NOT_CLAIMED or not all(c.applied for c in claimed):
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
                if error_type(exc) == TASK_NOT_FOUND:
                    raise
                decision = await self._attention("reconcile", f"cannot ask the provider: {describe(exc)}")
                if decision.action is ResolveAction.ACCEPT_DUPLICATE_RISK and self._patched(ACCEPTED_RISK_ENDS):
                    self._route_pinned = True  # its job may exist on this route: later attempts stay on it
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
                self._route_pinned = True
                await self._release_slot()
                return None

    def _track(self, job_id: str | None) -> JobRef:
        """Follow this job from now: its deadline counts from here, so queue time, retry waits and
        earlier attempts never shorten it (runs from before job-deadline-v1 count from validation)."""
        self._live = JobRef(task_id=self._task_id, attempt_no=self._attempt_no, job_id=job_id or "")
        self._tell("following_job", f"job {job_id} at {self._info.provider}: accepted", job_status="ACCEPTED")
        if self._patched(JOB_DEADLINE):
            self._deadline = workflow.now() + timedelta(seconds=self._info.deadline_s)
        return self._live

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
