"""Follow a provider job: one status query, one cancel, and the accounting of stray jobs.

Each records what it saw on the attempt row; an attempt's state only moves forward (a late
"running" never overwrites "succeeded"), and progress is display-only and never lowered.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal

from sqlalchemy import select, update
from temporalio import activity

from activities.errors import NOT_YET_CONCLUSIVE, classified, retry_later
from activities.failpoints import failpoint
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
from metrics import POLL_BUDGET_LATE, POLL_BUDGET_REFUSED, POLL_BUDGET_WAIT, STATUS_CALLS
from schema.db import Database
from schema.models import Attempt, StrayJob, Task
from schema.poll_budget import LATE_S, book_turn
from schema.state_machine import ATTEMPT_SETTLED, AttemptState
from schema.strays import book_stray
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
# A status call waits for its turn in the provider's polling budget for at most this share of the
# step's start-to-close timeout (5 s of poll_job's 15 s), leaving the rest to the call itself: the
# wait never times the step out. A turn further away is not booked; the step is retried once the
# budget's backlog has passed (its retry delay), and the workflow's own outage pacing takes over
# when those tries run out.
BUDGET_WAIT_SHARE = 1 / 3
HEARTBEAT_EVERY_S = 1.0  # while waiting, when the step has a heartbeat timeout


class PollActivities:
    def __init__(self, db: Database, providers: dict[str, VideoProvider],
                 polls_per_second: Mapping[str, float] | None = None):
        """`polls_per_second`: the providers with a polling budget (REELQUEUE_PROVIDER_LIMITS)."""
        self.db = db
        self.providers = providers
        self.polls_per_second = dict(polls_per_second or {})

    def _route(self, task_id: str) -> tuple[VideoProvider, str, float]:
        """The task's provider, model and duration."""
        with self.db.transaction() as session:
            task = session.get(Task, task_id)
            if task is None:
                raise TaskNotFound(task_id)
            return self.providers[task.provider], task.model, float(task.duration_s)

    def _observe(self, task_id: str, ask: Callable[[VideoProvider], JobState]) -> tuple[VideoProvider, JobState]:
        """One call to the task's provider; a provider that reports no usage is priced from its
        table (hosted adapters' `priced`), so every ended job carries what it costs."""
        provider, model, duration_s = self._route(task_id)
        state = ask(provider)
        priced = getattr(provider, "priced", None)
        return provider, (priced(state, model, duration_s) if priced else state)

    @activity.defn(name="poll_job")
    @classified
    def poll_job(self, ref: JobRef) -> PollResult:
        _, state = self._observe(ref.task_id, lambda p: _status_call(p, ref.job_id, self._wait_turn))
        bind(provider=state.provider)
        annotate(provider=state.provider, job_id=ref.job_id, request_key=state.request_key,
                 job_status=state.status.value)
        failpoint("mid_poll")
        offered = ref.move_on.get(state.status)
        done = self._record(ref, state, poll=True, moves=[offered] if offered is not None else [])
        return _result(state).model_copy(update={"moved": moved(done)})

    @activity.defn(name="cancel_job")
    @classified
    def cancel_job(self, ref: JobRef) -> PollResult:
        """Ask the provider to stop the job; a provider that cannot cancel is asked for its status."""
        _, state = self._observe(ref.task_id, _stopper(ref.job_id))
        self._record(ref, state, poll=False)
        return _result(state)

    @activity.defn(name="account_stray_job")
    @classified
    def account_stray_job(self, ref: StrayJobRef) -> StrayJobResult:
        """Cancel a duplicate job where the provider allows, wait for its end, record its cost as an
        ADJUSTMENT carrying the job id. Retried (with a delay) until the job is terminal."""
        provider, state = self._observe(ref.task_id, _stopper(ref.job_id))
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
                .where(StrayJob.task_id == ref.task_id, StrayJob.accounted.is_(False)).order_by(StrayJob.id)
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

    def _wait_turn(self, provider: str) -> None:
        """Wait for this status call's turn in `provider`'s polling budget, if it has one (heartbeating
        when the step has a heartbeat timeout). A turn too far away is a retry after the backlog; a
        turn this thread woke for too late (LATE_S: a loaded host) is let go and another booked."""
        rate = self.polls_per_second.get(provider)
        if rate is None:
            return
        info = activity.info()
        max_wait_s = (info.start_to_close_timeout.total_seconds() if info.start_to_close_timeout else 15.0) \
            * BUDGET_WAIT_SHARE
        give_up = time.monotonic() + max_wait_s
        while True:
            with self.db.transaction() as session:
                turn = book_turn(session, provider, rate, max(0.0, give_up - time.monotonic()))
            if not turn.booked:
                POLL_BUDGET_REFUSED.labels(provider).inc()
                raise retry_later(f"{provider}'s polling budget ({rate:g}/s) is booked {turn.wait_s:.1f} s ahead",
                                  NOT_YET_CONCLUSIVE, max(turn.wait_s, 1.0))
            POLL_BUDGET_WAIT.labels(provider).inc(turn.wait_s)
            at = time.monotonic() + turn.wait_s
            while (left := at - time.monotonic()) > 0:
                time.sleep(min(left, HEARTBEAT_EVERY_S))
                if info.heartbeat_timeout:
                    activity.heartbeat()
            if time.monotonic() - at <= LATE_S:
                return
            POLL_BUDGET_LATE.labels(provider).inc()

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


def _stopper(job_id: str) -> Callable[[VideoProvider], JobState]:
    """Cancel where the provider allows, else ask for the status."""
    return lambda p: p.cancel(job_id) if p.capabilities.cancel else p.get_job(job_id)


def _result(state: JobState) -> PollResult:
    expires = state.outputs[0].expires_at if state.outputs else None
    if expires is not None and expires.tzinfo is None:
        expires = expires.replace(tzinfo=UTC)
    return PollResult(
        status=state.status, raw_status=state.raw_status, progress=state.progress,
        cost=state.usage.cost if state.usage else None, error_class=state.error_class, error=state.error_message,
        output_expires_at=expires,
    )


def _status_call(provider: VideoProvider, job_id: str, wait_turn: Callable[[str], None]) -> JobState:
    """One status call, once it is its turn in the provider's polling budget; counted by outcome for
    /metrics."""
    wait_turn(provider.name)
    try:
        state = provider.get_job(job_id)
    except Exception:
        STATUS_CALLS.labels(provider.name, "error").inc()
        raise
    STATUS_CALLS.labels(provider.name, "ok").inc()
    return state
