"""Submit with a request key, reconcile a submit whose outcome is unknown, abandon one on an
operator's word.

Two short transactions around the call: A records the attempt as SENDING, the call happens
outside any transaction, B records what came back. Every write of an attempt's outcome is a
compare-and-set on its `submit_state`, so a late answer can never overwrite a conclusion (it is
kept as a stray job instead). An attempt found still SENDING on entry means an earlier run died
mid-call: that outcome is unknown, so this run does not send again; the workflow reconciles. A task
that is not DISPATCHING (the state machine refused its dispatch) is never sent: the last line of
defence behind the transition table.

Webhooks: a submit asks for them when the provider offers them and the settings allow it
(`webhook_url`). A webhook may beat the submit's answer; the gateway keeps it as an orphan, and
transaction B, which records the job id, claims it and returns it in `early_updates`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session
from temporalio import activity

from activities.admission import GateNotices
from activities.errors import DISPATCH_NOT_CLAIMED, NOT_YET_CONCLUSIVE, business_failure, classified, retry_later
from activities.failpoints import failpoint
from activities.tasks import apply_moves, moved
from adapters.providers.base import GenerationRequest, JobState, SubmitResult, VideoProvider
from adapters.storage import ObjectStorage
from catalog.expand import OVERLAY_FIELDS
from contracts.admission import submit_failure
from contracts.messages import (
    AttemptRef,
    ProviderUpdate,
    ReconcileOutcome,
    ReconcileResult,
    SubmitActivityResult,
    TransitionInput,
)
from contracts.provider import ErrorClass, SubmitOutcome
from contracts.task import TaskStatus
from metrics import SUBMITS
from schema import webhook_inbox as inbox
from schema.db import Database
from schema.models import Asset, Attempt, StrayJob, Task
from schema.state_machine import ATTEMPT_SETTLED, ATTEMPT_UNRESOLVED, AttemptState
from schema.task_store import TaskNotFound
from telemetry.logs import bind
from telemetry.tracing import annotate

SOFTWARE_VERSION = "0.2.0"
INPUT_URL_TTL = timedelta(hours=2)

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
_UNRESOLVED = [s.value for s in ATTEMPT_UNRESOLVED]
_OPEN = [s.value for s in AttemptState if s not in ATTEMPT_SETTLED]


def request_key(task_id: str, attempt_no: int) -> str:
    """Our idempotency key for one provider submit: task id + attempt number, never random."""
    return f"{task_id}-a{attempt_no}"


class SubmitActivities:
    def __init__(
        self,
        db: Database,
        storage: ObjectStorage,
        providers: dict[str, VideoProvider],
        worker_id: str,
        webhook_url: Callable[[str], str | None] | None = None,
        gate: GateNotices | None = None,
        inside: Callable[[str], bool] | None = None,
    ):
        self.db = db
        self.storage = storage
        self.providers = providers
        self.worker_id = worker_id
        self._webhook_url = webhook_url or (lambda _provider: None)  # Settings.webhook_url: None when off
        self.gate = gate or GateNotices(None, None)  # renew-in-submit-v1: tells the gate of an acceptance
        # Settings.emulated: a provider on our own network gets its input image on the internal S3
        # endpoint; every other one on the public endpoint (REELQUEUE_S3_PUBLIC_ENDPOINT) it can reach.
        self._inside = inside or (lambda _provider: False)

    def webhook_url(self, provider: str) -> str | None:
        """Where this provider should send its webhooks, if it offers them and they are on."""
        adapter = self.providers.get(provider)
        return self._webhook_url(provider) if adapter is not None and adapter.capabilities.webhooks else None

    @activity.defn(name="submit")
    @classified
    def submit(self, ref: AttemptRef) -> SubmitActivityResult:
        key = request_key(ref.task_id, ref.attempt_no)
        with self.db.transaction() as session:  # transaction A: record the intent (and the dispatch move)
            task = _task(session, ref.task_id)
            attempt = _attempt(session, ref)
            resumed = self._resumed(session, attempt, ref) if attempt is not None else None
            if resumed is None:
                claimed = apply_moves(session, ref.moves)
                status = claimed[-1][1].status if claimed else task.status
                refused = status != TaskStatus.DISPATCHING.value or not all(out.applied for _, out in claimed)
                if not refused:
                    request = self._request(session, task, key)
                    self._intend(session, task, ref, key, request)
        if resumed is not None:
            return self._told(ref, resumed)
        dispatched = moved(claimed)
        if refused:  # the state machine refused this dispatch (its refusal is recorded): nothing is sent
            raise business_failure(f"task {task.id} is {status}, not DISPATCHING: nothing is sent",
                                   DISPATCH_NOT_CLAIMED)
        failpoint("before_submit")
        bind(provider=task.provider)
        result = self.providers[task.provider].submit(request)  # outside any transaction
        annotate(provider=task.provider, request_key=key, job_id=result.job_id, outcome=result.outcome.value)
        SUBMITS.labels(task.provider, result.outcome.value).inc()
        if result.outcome is SubmitOutcome.ACCEPTED:
            failpoint("after_accept_before_record")
        with self.db.transaction() as session:  # transaction B: record the result, if still SENDING
            if not _record_submit(session, ref, result):
                attempt = _attempt(session, ref)
                if result.job_id and result.job_id != attempt.provider_job_id:
                    _keep_strays(session, attempt, [result.job_id], found_by="late_answer")
                activity.logger.warning("submit %s answered after its attempt was concluded (%s)", key,
                                        attempt.submit_state)
                resumed = self._resumed(session, attempt, ref)
            else:
                early = _claim_early_updates(session, task.id, task.provider, key, result.job_id)
                accepted = apply_moves(session, _accepted_move(ref, result.outcome, result.job_id))
        if resumed is not None:
            return self._told(ref, resumed)
        return self._told(ref, SubmitActivityResult(
            outcome=result.outcome, job_id=result.job_id, error_class=result.error_class,
            error=result.error_message, retry_after_s=result.retry_after_s,
            webhooks=request.webhook_url is not None, early_updates=early,
            failure=submit_failure(result.outcome, result.http_status), moved=dispatched + moved(accepted),
        ))

    def _told(self, ref: AttemptRef, result: SubmitActivityResult) -> SubmitActivityResult:
        """After the transactions: an accepted submit's renewal sent to the gate when the request carries
        one (renew-in-submit-v1); sent again by a step that runs again, the gate counts it once."""
        if result.outcome is not SubmitOutcome.ACCEPTED or ref.renewal is None or ref.gate_id is None:
            return result
        return result.model_copy(update={"renewed": self.gate.renew(ref.gate_id, ref.renewal)})

    @activity.defn(name="reconcile_submit")
    @classified
    def reconcile_submit(self, ref: AttemptRef) -> ReconcileResult:
        """Ask the provider which jobs exist for our request key before any resubmit.

        "Absent" is concluded only on the provider's answer, once its acceptance window has passed
        since our call ended; a provider without a lookup is NOT_ASKABLE (a person decides).
        """
        key = request_key(ref.task_id, ref.attempt_no)
        with self.db.transaction() as session:
            attempt = _attempt(session, ref)
            if attempt is None:  # transaction A never committed, so nothing was sent: make sure of it
                attempt = _tombstone(session, ref, key)
            concluded = _concluded(attempt, session=session)
            if concluded is not None:
                return concluded
            provider = self.providers[attempt.provider]
            caps = provider.capabilities
            call_ended = attempt.call_ended_at or attempt.sent_at + timedelta(seconds=caps.submit_timeout_s)
            sent_at = attempt.sent_at
        if not caps.can_reconcile:
            return ReconcileResult(outcome=ReconcileOutcome.NOT_ASKABLE,
                                   evidence=f"{attempt.provider} offers no lookup of jobs by request key or list")
        jobs = [j.job_id for j in self._find(provider, ref, key, sent_at)]  # oldest first
        conclusive_at = call_ended + timedelta(seconds=caps.acceptance_window_s)
        now = datetime.now(UTC)
        if not jobs and now < conclusive_at:
            wait = (conclusive_at - now).total_seconds()
            raise retry_later(f"no job for {key} yet; asking again in {wait:.0f}s", NOT_YET_CONCLUSIVE, wait)
        with self.db.transaction() as session:
            values = {"updated_at": now, "call_ended_at": call_ended}
            if jobs:
                values |= {"submit_state": AttemptState.ACKED.value, "provider_job_id": jobs[0], "acked_at": now}
            else:
                values |= {"submit_state": AttemptState.FAILED_BEFORE_ACCEPT.value,
                           "error_message": f"reconciled: {attempt.provider} holds no job for {key}"}
            _cas(session, ref, _UNRESOLVED, values)
            attempt = _attempt(session, ref)
            if attempt.provider_job_id:  # its webhooks kept as orphans are this task's (polling resumes)
                inbox.claim_orphans(session, provider=attempt.provider, task_id=attempt.task_id,
                                    job_id=attempt.provider_job_id, request_key=key, by=inbox.MatchedBy.RECONCILE)
            _keep_strays(session, attempt, [j for j in jobs if j != attempt.provider_job_id], found_by="reconcile")
            return _concluded(attempt, session=session) or ReconcileResult(outcome=ReconcileOutcome.ABSENT)

    @activity.defn(name="abandon_attempt")
    @classified
    def abandon_attempt(self, ref: AttemptRef) -> bool:
        """An operator stopped tracking this attempt (an unknown submit, or a job that could not
        be stopped); it may bill once. The state event of the decision says who and why."""
        with self.db.transaction() as session:
            return _cas(session, ref, _OPEN, {"submit_state": AttemptState.ABANDONED.value,
                                               "updated_at": datetime.now(UTC)})

    def _intend(self, session: Session, task: Task, ref: AttemptRef, key: str, request: GenerationRequest) -> None:
        """Transaction A's own write: the attempt, SENDING, before the call."""
        now = datetime.now(UTC)
        session.add(
            Attempt(
                task_id=task.id, attempt_no=ref.attempt_no, provider=task.provider, model=task.model,
                request_key=key, submit_state=AttemptState.SENDING.value,
                request_fingerprint=_fingerprint(request), worker_id=self.worker_id,
                software_version=SOFTWARE_VERSION, sent_at=now, updated_at=now, route_note=ref.route_note,
            )
        )
        task.current_attempt_no = max(task.current_attempt_no, ref.attempt_no)

    def _resumed(self, session: Session, attempt: Attempt, ref: AttemptRef) -> SubmitActivityResult:
        """What an earlier run of this attempt already established (never send twice), with the
        orphans its transaction B claimed: a retried activity returns the same early updates, and the
        moves it carries (recorded once per source event) as they stand."""
        early = (inbox.claimed_updates(session, provider=attempt.provider, job_id=attempt.provider_job_id)
                 if attempt.provider_job_id else [])
        webhooks = self.webhook_url(attempt.provider) is not None
        resumed = _resumed(attempt)
        done = apply_moves(session, ref.moves)
        if len(done) == len(ref.moves):
            done += apply_moves(session, _accepted_move(ref, resumed.outcome, resumed.job_id))
        return resumed.model_copy(update={"webhooks": webhooks, "early_updates": early, "moved": moved(done)})

    def _find(self, provider: VideoProvider, ref: AttemptRef, key: str, sent_at: datetime | None) -> list[JobState]:
        """The provider's jobs for this attempt: by our request key, or, for a provider that only
        echoes what it was asked (`find_by_request`), by the same request sent since `sent_at`."""
        by_request = getattr(provider, "find_by_request", None)
        if by_request is None or sent_at is None:
            return provider.find_by_request_key(key)
        with self.db.transaction() as session:
            request = self._request(session, _task(session, ref.task_id), key)
        return by_request(request, sent_at)

    def _request(self, session: Session, task: Task, key: str) -> GenerationRequest:
        image_url = None
        if task.image_asset_id:
            image = session.get(Asset, task.image_asset_id)
            image_url = self.storage.presigned_url(image.key, INPUT_URL_TTL, internal=self._inside(task.provider))
        overlay = [task.overlay.get(k, "") for k in OVERLAY_FIELDS]
        return GenerationRequest(
            request_key=key, model=task.model, prompt=task.prompt_override or task.prompt, image_url=image_url,
            aspect_ratio=task.aspect_ratio, duration_s=float(task.duration_s),
            overlay_lines=[line for line in overlay if line], webhook_url=self.webhook_url(task.provider),
        )


def _accepted_move(ref: AttemptRef, outcome: SubmitOutcome, job_id: str | None) -> list[TransitionInput]:
    """The move the workflow offered for an accepted submit, with the job's id; none otherwise."""
    if ref.accepted is None or outcome is not SubmitOutcome.ACCEPTED:
        return []
    return [ref.accepted.with_facts(job_id=job_id)]


def _task(session: Session, task_id: str) -> Task:
    task = session.get(Task, task_id)
    if task is None:
        raise TaskNotFound(task_id)
    return task


def _attempt(session: Session, ref: AttemptRef) -> Attempt | None:
    return session.scalar(
        select(Attempt).where(Attempt.task_id == ref.task_id, Attempt.attempt_no == ref.attempt_no)
        .execution_options(populate_existing=True)
    )


def _tombstone(session: Session, ref: AttemptRef, key: str) -> Attempt:
    """Record an attempt that was never sent, so a late run of its submit finds it and never sends."""
    task = _task(session, ref.task_id)
    now = datetime.now(UTC)
    attempt = Attempt(task_id=task.id, attempt_no=ref.attempt_no, provider=task.provider, model=task.model,
                      request_key=key, submit_state=AttemptState.FAILED_BEFORE_ACCEPT.value, request_fingerprint="",
                      error_message="never sent: no submit intent was recorded", updated_at=now)
    session.add(attempt)
    session.flush()
    return attempt


def _cas(session: Session, ref: AttemptRef, expected: list[str], values: dict) -> bool:
    """Write `values` only if the attempt is still in one of the `expected` states."""
    result = session.execute(
        update(Attempt)
        .where(Attempt.task_id == ref.task_id, Attempt.attempt_no == ref.attempt_no,
               Attempt.submit_state.in_(expected))
        .values(**values),
        execution_options={"synchronize_session": False},
    )
    return result.rowcount == 1


def _record_submit(session: Session, ref: AttemptRef, result: SubmitResult) -> bool:
    now = datetime.now(UTC)
    values = {
        "submit_state": _AFTER_CALL[result.outcome].value, "provider_job_id": result.job_id,
        "http_status": result.http_status, "error_class": result.error_class.value if result.error_class else None,
        "error_message": result.error_message, "updated_at": now, "call_ended_at": now,
    }
    if result.outcome is SubmitOutcome.ACCEPTED:
        values["acked_at"] = now
    return _cas(session, ref, [AttemptState.SENDING.value], values)


def _keep_strays(session: Session, attempt: Attempt, job_ids: Iterable[str], *, found_by: str) -> None:
    for job_id in job_ids:
        session.execute(
            insert(StrayJob)
            .values(task_id=attempt.task_id, attempt_no=attempt.attempt_no, provider=attempt.provider,
                    provider_job_id=job_id, found_by=found_by)
            .on_conflict_do_nothing(index_elements=["provider", "provider_job_id"])
        )


def _concluded(attempt: Attempt, *, session: Session) -> ReconcileResult | None:
    """What an earlier run (or a late submit answer) already established for this attempt, read
    from the database so a re-run answers the same: a found job comes with its webhooks kept as
    orphans and the attempt's duplicates not yet accounted (the workflow has seen neither)."""
    state = AttemptState(attempt.submit_state)
    if attempt.provider_job_id:
        early = inbox.claimed_updates(session, provider=attempt.provider, job_id=attempt.provider_job_id)
        duplicates = session.scalars(
            select(StrayJob.provider_job_id)
            .where(StrayJob.task_id == attempt.task_id, StrayJob.attempt_no == attempt.attempt_no,
                   StrayJob.provider_job_id != attempt.provider_job_id, StrayJob.accounted.is_(False))
            .order_by(StrayJob.id)
        ).all()
        return ReconcileResult(outcome=ReconcileOutcome.FOUND, job_id=attempt.provider_job_id,
                               duplicates=list(duplicates), early_updates=early)
    if state in ATTEMPT_UNRESOLVED:
        return None
    return ReconcileResult(outcome=ReconcileOutcome.ABSENT, evidence=attempt.error_message or state.value)


def _claim_early_updates(
    session: Session, task_id: str, provider: str, key: str, job_id: str | None
) -> list[ProviderUpdate]:
    """In the transaction that records the job: its orphaned webhooks become this task's, and the
    ones about this job go back to the workflow, newest last."""
    if job_id is None:
        return []
    inbox.claim_orphans(session, provider=provider, task_id=task_id, job_id=job_id, request_key=key,
                        by=inbox.MatchedBy.SUBMIT)
    return inbox.claimed_updates(session, provider=provider, job_id=job_id)


def _resumed(attempt: Attempt) -> SubmitActivityResult:
    """What an earlier run of this attempt already established (never send twice)."""
    if attempt.submit_state == AttemptState.FAILED.value and not attempt.provider_job_id:
        outcome = SubmitOutcome.REJECTED_FINAL
    else:
        outcome = _RESUME.get(AttemptState(attempt.submit_state), SubmitOutcome.UNKNOWN)
    return SubmitActivityResult(
        outcome=outcome, job_id=attempt.provider_job_id, error=attempt.error_message,
        error_class=ErrorClass(attempt.error_class) if attempt.error_class else None,
    )


def _fingerprint(request: GenerationRequest) -> str:
    """Hash of what we asked for, minus the signed (expiring) part of the image URL."""
    data = request.model_dump(mode="json")
    data["image_url"] = (data["image_url"] or "").split("?")[0]
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
