"""Submit with a request key, and reconcile a submit whose outcome is unknown.

Two short transactions around the call (seed 002 section 4.2.7): A records the attempt as
SENDING, the call happens outside any transaction, B records what came back. An attempt found
still SENDING on entry means an earlier run died mid-call: that outcome is unknown, so this run
does not send again; the workflow reconciles first.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from temporalio import activity

from activities.errors import NOT_YET_CONCLUSIVE, retry_later
from adapters.providers.base import GenerationRequest, SubmitOutcome, SubmitResult, VideoProvider
from adapters.storage import ObjectStorage
from schema.contracts import AttemptRef, ReconcileResult, SubmitActivityResult
from schema.db import Database
from schema.models import Asset, Attempt, Task
from schema.state_machine import AttemptState

SOFTWARE_VERSION = "0.1.0"
INPUT_URL_TTL = timedelta(hours=2)
# How long after sending we keep looking before concluding the provider never created the job.
RECONCILE_GRACE = timedelta(seconds=10)

_RESUME = {
    AttemptState.ACKED: SubmitOutcome.ACCEPTED,
    AttemptState.RUNNING: SubmitOutcome.ACCEPTED,
    AttemptState.SUCCEEDED: SubmitOutcome.ACCEPTED,
    AttemptState.FAILED: SubmitOutcome.ACCEPTED,
    AttemptState.CANCELED: SubmitOutcome.ACCEPTED,
    AttemptState.SENDING: SubmitOutcome.UNKNOWN,
    AttemptState.UNKNOWN: SubmitOutcome.UNKNOWN,
    AttemptState.FAILED_BEFORE_ACCEPT: SubmitOutcome.REJECTED_RETRYABLE,
}
_AFTER_CALL = {
    SubmitOutcome.ACCEPTED: AttemptState.ACKED,
    SubmitOutcome.UNKNOWN: AttemptState.UNKNOWN,
    SubmitOutcome.REJECTED_RETRYABLE: AttemptState.FAILED_BEFORE_ACCEPT,
    SubmitOutcome.REJECTED_FINAL: AttemptState.FAILED,
}


def request_key(task_id: str, attempt_no: int) -> str:
    """Our idempotency key for one provider submit: task id + attempt number, never random."""
    return f"{task_id}-a{attempt_no}"


class SubmitActivities:
    def __init__(self, db: Database, storage: ObjectStorage, providers: dict[str, VideoProvider], worker_id: str):
        self.db = db
        self.storage = storage
        self.providers = providers
        self.worker_id = worker_id

    @activity.defn(name="submit")
    def submit(self, ref: AttemptRef) -> SubmitActivityResult:
        key = request_key(ref.task_id, ref.attempt_no)
        with self.db.transaction() as session:  # transaction A: record the intent
            task = session.get(Task, ref.task_id)
            attempt = _attempt(session, ref)
            if attempt is not None:
                return SubmitActivityResult(
                    outcome=_resume_outcome(attempt).value, job_id=attempt.provider_job_id,
                    error_class=attempt.error_class, error=attempt.error_message,
                )
            request = self._request(session, task, key)
            now = datetime.now(UTC)
            session.add(
                Attempt(
                    task_id=task.id, attempt_no=ref.attempt_no, provider=task.provider, model=task.model,
                    request_key=key, submit_state=AttemptState.SENDING.value,
                    request_fingerprint=_fingerprint(request), worker_id=self.worker_id,
                    software_version=SOFTWARE_VERSION, sent_at=now, updated_at=now,
                )
            )
            task.current_attempt_no = max(task.current_attempt_no, ref.attempt_no)
        result = self.providers[task.provider].submit(request)  # outside any transaction
        with self.db.transaction() as session:  # transaction B: record the result
            attempt = _attempt(session, ref)
            _record_submit(attempt, result)
        return SubmitActivityResult(
            outcome=result.outcome.value, job_id=result.job_id,
            error_class=result.error_class.value if result.error_class else None,
            error=result.error_message, retry_after_s=result.retry_after_s,
        )

    @activity.defn(name="reconcile_submit")
    def reconcile_submit(self, ref: AttemptRef) -> ReconcileResult:
        """Ask the provider which jobs exist for our request key before any resubmit."""
        key = request_key(ref.task_id, ref.attempt_no)
        with self.db.transaction() as session:
            attempt = _attempt(session, ref)
            provider_name, sent_at = attempt.provider, attempt.sent_at
            if attempt.provider_job_id:
                return ReconcileResult(found=True, job_id=attempt.provider_job_id)
        jobs = sorted(self.providers[provider_name].find_by_request_key(key), key=lambda j: j.job_id)
        if not jobs and sent_at and datetime.now(UTC) - sent_at < RECONCILE_GRACE:
            wait = (RECONCILE_GRACE - (datetime.now(UTC) - sent_at)).total_seconds()
            raise retry_later(f"no job for {key} yet; asking again in {wait:.0f}s", NOT_YET_CONCLUSIVE, wait)
        with self.db.transaction() as session:
            attempt = _attempt(session, ref)
            attempt.updated_at = datetime.now(UTC)
            if not jobs:
                attempt.submit_state = AttemptState.FAILED_BEFORE_ACCEPT.value
                attempt.error_message = "reconciled: provider holds no job for this request key"
                return ReconcileResult(found=False)
            attempt.submit_state = AttemptState.ACKED.value
            attempt.provider_job_id = jobs[0].job_id
            attempt.acked_at = attempt.updated_at
            duplicates = [j.job_id for j in jobs[1:]]
            if duplicates:
                attempt.error_message = f"duplicate provider jobs for one request key: {duplicates}"
            return ReconcileResult(found=True, job_id=jobs[0].job_id, duplicates=duplicates)

    def _request(self, session, task: Task, key: str) -> GenerationRequest:  # noqa: ANN001 - Session
        image_url = None
        if task.image_asset_id:
            image = session.get(Asset, task.image_asset_id)
            image_url = self.storage.presigned_url(image.key, INPUT_URL_TTL)
        overlay = [task.overlay.get(k, "") for k in ("title", "price", "hook")]
        return GenerationRequest(
            request_key=key, model=task.model, prompt=task.prompt, image_url=image_url,
            aspect_ratio=task.aspect_ratio, duration_s=float(task.duration_s),
            overlay_lines=[line for line in overlay if line],
        )


def _attempt(session, ref: AttemptRef) -> Attempt | None:  # noqa: ANN001 - Session
    return session.scalar(
        select(Attempt).where(Attempt.task_id == ref.task_id, Attempt.attempt_no == ref.attempt_no)
    )


def _resume_outcome(attempt: Attempt) -> SubmitOutcome:
    """What an earlier run of this attempt already established (never send twice)."""
    if attempt.submit_state == AttemptState.FAILED.value and not attempt.provider_job_id:
        return SubmitOutcome.REJECTED_FINAL
    return _RESUME.get(AttemptState(attempt.submit_state), SubmitOutcome.UNKNOWN)


def _fingerprint(request: GenerationRequest) -> str:
    """Hash of what we asked for, minus the signed (expiring) part of the image URL."""
    data = request.model_dump(mode="json")
    data["image_url"] = (data["image_url"] or "").split("?")[0]
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _record_submit(attempt: Attempt, result: SubmitResult) -> None:
    now = datetime.now(UTC)
    attempt.submit_state = _AFTER_CALL[result.outcome].value
    attempt.provider_job_id = result.job_id
    attempt.http_status = result.http_status
    attempt.error_class = result.error_class.value if result.error_class else None
    attempt.error_message = result.error_message
    attempt.updated_at = now
    if result.outcome is SubmitOutcome.ACCEPTED:
        attempt.acked_at = now
