"""Follow a provider job: one status query, one cancel, and the accounting of stray jobs.

Each records what it saw on the attempt row; an attempt's state only moves forward (a late
"running" never overwrites "succeeded"), and progress is display-only and never lowered.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from decimal import Decimal

from sqlalchemy import select, update
from temporalio import activity

from activities.admission import GateNotices
from activities.errors import NOT_YET_CONCLUSIVE, classified, retry_later
from activities.failpoints import failpoint
from activities.status_calls import StatusCalls
from activities.tasks import Applied, apply_moves, moved
from adapters.providers.base import JobState, VideoProvider
from contracts.messages import (
    JobRef,
    PollResult,
    StrayCostAcceptance,
    StrayJobRef,
    StrayJobResult,
    TaskRef,
    TransitionInput,
)
from contracts.provider import TERMINAL_JOB_STATUSES, JobStatus
from schema.db import Database
from schema.models import Attempt, StrayJob, Task
from schema.state_machine import ATTEMPT_SETTLED, AttemptState
from schema.strays import book_stray, unaccounted
from schema.task_store import TaskNotFound
from telemetry.logs import bind
from telemetry.tracing import annotate

_ATTEMPT_STATE = {
    JobStatus.QUEUED: AttemptState.ACKED,
    JobStatus.THROTTLED: AttemptState.ACKED,
    JobStatus.RUNNING: AttemptState.RUNNING,
    JobStatus.SUCCEEDED: AttemptState.SUCCEEDED,
    JobStatus.FAILED: AttemptState.FAILED,
    JobStatus.CANCELED: AttemptState.CANCELED,
    JobStatus.EXPIRED: AttemptState.FAILED,
}
_FINAL_STATES = [s.value for s in ATTEMPT_SETTLED]
class PollActivities:
    def __init__(self, db: Database, providers: dict[str, VideoProvider], status_calls: StatusCalls | None = None,
                 gate: GateNotices | None = None):
        """`status_calls`: how status calls are made (the providers' polling budgets); none by default.
        `gate`: tells a provider's gate that a job observed terminal gave its slot back (release-in-step-v1)."""
        self.db = db
        self.providers = providers
        self.status_calls = status_calls or StatusCalls(db)
        self.gate = gate or GateNotices(None, None)

    def _route(self, task_id: str, attempt_no: int | None, stray_job_id: str | None = None,
               ) -> tuple[VideoProvider, str, float]:
        """Where a job of the task lives: the provider and model of the attempt that made it (a duplicate:
        its stray row's provider), the task's row only when no attempt names one. A task that changed route
        since keeps asking the provider that has the job; and the duration."""
        with self.db.transaction() as session:
            task = session.get(Task, task_id)
            if task is None:
                raise TaskNotFound(task_id)
            provider, model = task.provider, task.model
            if stray_job_id is not None:
                stray = session.scalar(select(StrayJob).where(StrayJob.task_id == task_id,
                                                              StrayJob.provider_job_id == stray_job_id))
                provider = stray.provider if stray is not None else provider
            attempt = None if attempt_no is None else session.scalar(
                select(Attempt).where(Attempt.task_id == task_id, Attempt.attempt_no == attempt_no))
            if attempt is not None and (stray_job_id is None or attempt.provider == provider):
                provider, model = attempt.provider, attempt.model
            return self.providers[provider], model, float(task.duration_s)

    def _observe(self, task_id: str, attempt_no: int | None, ask: Callable[[VideoProvider], JobState], *,
                 stray_job_id: str | None = None) -> tuple[VideoProvider, JobState]:
        """One call to the provider that has the job; a provider that reports no usage is priced from its
        table (hosted adapters' `priced`), so every ended job carries what it costs."""
        provider, model, duration_s = self._route(task_id, attempt_no, stray_job_id)
        state = ask(provider)
        priced = getattr(provider, "priced", None)
        return provider, (priced(state, model, duration_s) if priced else state)

    @activity.defn(name="poll_job")
    @classified
    def poll_job(self, ref: JobRef) -> PollResult:
        _, state = self._observe(ref.task_id, ref.attempt_no, lambda p: self.status_calls.get_job(p, ref.job_id))
        bind(provider=state.provider)
        annotate(provider=state.provider, job_id=ref.job_id, request_key=state.request_key,
                 job_status=state.status.value)
        failpoint("mid_poll")
        offered = ref.move_on.get(state.status)
        done = self._record(ref, state, poll=True, moves=[offered] if offered is not None else [])
        result = _result(state).model_copy(update={"moved": moved(done)})
        if result.terminal and ref.release is not None and ref.gate_id is not None:  # after the transaction
            result.released = self.gate.release(ref.gate_id, ref.release)
        return result

    @activity.defn(name="cancel_job")
    @classified
    def cancel_job(self, ref: JobRef) -> PollResult:
        """Ask the provider to stop the job; a provider that cannot cancel is asked for its status."""
        _, state = self._observe(ref.task_id, ref.attempt_no, self._stopper(ref.job_id))
        self._record(ref, state, poll=False)
        return _result(state)

    @activity.defn(name="account_stray_job")
    @classified
    def account_stray_job(self, ref: StrayJobRef) -> StrayJobResult:
        """Cancel a duplicate job where the provider allows, wait for its end, record its cost as an
        ADJUSTMENT carrying the job id. Retried (with a delay) until the job is terminal."""
        provider, state = self._observe(ref.task_id, ref.attempt_no, self._stopper(ref.job_id), stray_job_id=ref.job_id)
        cost = Decimal(str(state.usage.cost)) if state.usage and state.usage.cost is not None else Decimal(0)
        terminal = state.status in TERMINAL_JOB_STATUSES
        with self.db.transaction() as session:
            stray = session.scalar(select(StrayJob).where(StrayJob.provider == provider.name,
                                                          StrayJob.provider_job_id == ref.job_id))
            stray.provider_status = state.raw_status
            stray.updated_at = datetime.now(UTC)
            if terminal:
                book_stray(session, stray, cost, f"duplicate provider job ({stray.found_by})")
        if not terminal:
            raise retry_later(f"duplicate job {ref.job_id} is still {state.raw_status}", NOT_YET_CONCLUSIVE, 5.0)
        return StrayJobResult(status=state.status, cost=float(cost))

    @activity.defn(name="unaccounted_strays")
    @classified
    def unaccounted_strays(self, ref: TaskRef) -> list[StrayJobRef]:
        """The task's duplicate jobs not accounted yet, oldest first, whoever found them (a reconcile
        whose answer was lost, a submit answer that came late): the workflow asks before its ledger
        closes instead of trusting only what it saw."""
        with self.db.transaction() as session:
            rows = session.execute(
                select(StrayJob.attempt_no, StrayJob.provider_job_id)
                .where(unaccounted(ref.task_id)).order_by(StrayJob.id)
            ).all()
        return [StrayJobRef(task_id=ref.task_id, attempt_no=no, job_id=job) for no, job in rows]

    @activity.defn(name="accept_stray_cost")
    @classified
    def accept_stray_cost(self, decision: StrayCostAcceptance) -> float:
        """Book a duplicate job the provider refuses to answer for at the task's estimate for one
        job (its real cost is unknown), on a person's word; a later real accounting of the same
        job finds its ADJUSTMENT written and adds nothing."""
        ref = decision.stray
        with self.db.transaction() as session:
            stray = session.scalar(select(StrayJob).where(StrayJob.task_id == ref.task_id,
                                                          StrayJob.provider_job_id == ref.job_id))
            if stray.accounted:
                return float(stray.cost or 0)
            estimate = session.get(Task, ref.task_id).estimated_cost
            book_stray(session, stray, estimate,
                        f"duplicate provider job ({stray.found_by}): cost unknown, the task's estimate booked; "
                        f"accepted by {decision.by}: {decision.reason}".rstrip(": "))
            return float(estimate)

    def _stopper(self, job_id: str) -> Callable[[VideoProvider], JobState]:
        """Cancel where the provider allows, else ask for the status (a status call in its budget)."""
        return lambda p: p.cancel(job_id) if p.capabilities.cancel else self.status_calls.get_job(p, job_id)

    def _record(self, ref: JobRef, state: JobState, *, poll: bool, moves: Sequence[TransitionInput] = ()) -> Applied:
        """The observation on the attempt's row, and the moves it calls for (transition-in-work-v2: the
        workflow offers one per status), in one transaction."""
        now = datetime.now(UTC)
        values: dict = {"provider_status": state.raw_status, "submit_state": _ATTEMPT_STATE[state.status].value,
                        "updated_at": now}
        if state.usage is not None:
            values["usage"] = state.usage.model_dump(mode="json")
        if state.status in TERMINAL_JOB_STATUSES:
            values["completed_at"] = now
        if state.error_message:
            values["error_class"] = state.error_class.value if state.error_class else None
            values["error_message"] = state.error_message
        with self.db.transaction() as session:
            mine = (Attempt.task_id == ref.task_id, Attempt.attempt_no == ref.attempt_no)
            if poll:
                session.execute(update(Attempt).where(*mine).values(poll_count=Attempt.poll_count + 1))
            # Forward only: once the attempt is settled, a late observation changes nothing.
            session.execute(update(Attempt).where(*mine, Attempt.submit_state.not_in(_FINAL_STATES)).values(**values))
            if state.progress is not None:  # display only: never lower it, never derive status from it
                progress = Decimal(str(round(state.progress, 4)))
                session.execute(update(Task).where(Task.id == ref.task_id, Task.progress < progress)
                                .values(progress=progress))
            return apply_moves(session, list(moves))




def _result(state: JobState) -> PollResult:
    expires = state.outputs[0].expires_at if state.outputs else None
    if expires is not None and expires.tzinfo is None:
        expires = expires.replace(tzinfo=UTC)
    return PollResult(
        status=state.status, raw_status=state.raw_status, progress=state.progress,
        cost=state.usage.cost if state.usage else None, error_class=state.error_class, error=state.error_message,
        output_expires_at=expires,
    )
