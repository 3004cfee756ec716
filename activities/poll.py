"""Follow a provider job: one status query per call, and cancellation.

The workflow owns the polling rhythm (adaptive interval with jitter, woken early by webhooks);
this activity only asks once and records what it saw on the attempt row.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from sqlalchemy import select, update
from temporalio import activity

from adapters.providers.base import JobState, JobStatus, ProviderError, VideoProvider
from schema.contracts import JobRef, PollResult
from schema.db import Database
from schema.models import Attempt, Task
from schema.state_machine import AttemptState

_ATTEMPT_STATE = {
    JobStatus.QUEUED: AttemptState.ACKED,
    JobStatus.THROTTLED: AttemptState.ACKED,
    JobStatus.RUNNING: AttemptState.RUNNING,
    JobStatus.SUCCEEDED: AttemptState.SUCCEEDED,
    JobStatus.FAILED: AttemptState.FAILED,
    JobStatus.CANCELED: AttemptState.CANCELED,
    JobStatus.EXPIRED: AttemptState.FAILED,
}


class PollActivities:
    def __init__(self, db: Database, providers: dict[str, VideoProvider]):
        self.db = db
        self.providers = providers

    def _provider(self, ref: JobRef) -> VideoProvider:
        with self.db.transaction() as session:
            return self.providers[session.get(Task, ref.task_id).provider]

    @activity.defn(name="poll_job")
    def poll_job(self, ref: JobRef) -> PollResult:
        try:
            state = self._provider(ref).get_job(ref.job_id)
        except ProviderError as exc:
            if not exc.retryable:
                raise
            raise RuntimeError(f"status query failed, will retry: {exc}") from exc
        self._record(ref, state, poll=True)
        return _result(state)

    @activity.defn(name="cancel_job")
    def cancel_job(self, ref: JobRef) -> PollResult:
        state = self._provider(ref).cancel(ref.job_id)
        self._record(ref, state, poll=False)
        return _result(state)

    def _record(self, ref: JobRef, state: JobState, *, poll: bool) -> None:
        now = datetime.now(UTC)
        with self.db.transaction() as session:
            attempt = session.scalar(
                select(Attempt).where(Attempt.task_id == ref.task_id, Attempt.attempt_no == ref.attempt_no)
            )
            attempt.provider_status = state.raw_status
            attempt.submit_state = _ATTEMPT_STATE[state.status].value
            attempt.poll_count += 1 if poll else 0
            attempt.updated_at = now
            if state.usage is not None:
                attempt.usage = state.usage.model_dump(mode="json")
            if state.status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELED, JobStatus.EXPIRED):
                attempt.completed_at = attempt.completed_at or now
            if state.error_message:
                attempt.error_class = state.error_class.value if state.error_class else attempt.error_class
                attempt.error_message = state.error_message
            if state.progress is not None:  # display only: never lower it, never derive status from it
                session.execute(
                    update(Task)
                    .where(Task.id == ref.task_id, Task.progress < Decimal(str(round(state.progress, 4))))
                    .values(progress=Decimal(str(round(state.progress, 4))))
                )


def _result(state: JobState) -> PollResult:
    return PollResult(
        status=state.status.value, raw_status=state.raw_status, progress=state.progress,
        cost=state.usage.cost if state.usage else None,
        error_class=state.error_class.value if state.error_class else None, error=state.error_message,
    )
