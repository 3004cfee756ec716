"""The provider backstop: what each provider says it ran, compared with the ledger.

`reelqueue ledger reconcile` and the worker's periodic pass call `reconcile`. Each provider that
can list its jobs (adapters' JobLister) is asked for the jobs created in the window (one call per
page, outside any transaction); each job is then judged in a short transaction of its own:

- an attempt's own job: once its task has ended, a cost that differs from what the ledger booked
  for that attempt gets an ADJUSTMENT (more) or a REFUND (less) naming the difference; a success
  after the task ended CANCELED is also recorded as an orphan output (a stray_jobs row and an
  unapplied `orphan_output` state event), the task flagged for a person;
- a job of an attempt's request key that the attempt does not follow (the first job of an attempt
  whose duplicate risk a person accepted, a submit answer that was lost): a stray of that attempt,
  booked as an ADJUSTMENT naming it once the job ended and the task has ended (a running workflow
  accounts its own strays before it closes);
- a job no attempt knows: an orphan stray with no task, its cost booked as an ADJUSTMENT without
  task or tenant once the job ended, with the provider's listing as evidence.

Every write has a business key (per job), so a pass repeated or run by two processes at once
books each job once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from enum import StrEnum

from pydantic import BaseModel
from sqlalchemy import func, or_, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from adapters.providers.base import JobLister, JobState, OutputRef, ProviderError, Usage, VideoProvider
from contracts.provider import TERMINAL_JOB_STATUSES, JobStatus, WebhookEvent
from contracts.task import TaskStatus
from schema.db import Database
from schema.ledger_check import BACKSTOP, LATE_WEBHOOK, LEDGER_FINAL, fmt_amount
from schema.models import Attempt, CreditEntry, StateEvent, StrayJob, Task
from schema.state_machine import AttemptState
from schema.strays import book_stray

log = logging.getLogger(__name__)
DEFAULT_WINDOW = timedelta(hours=24)
CENT = Decimal("0.000001")  # the ledger's precision (activities/ledger.py)
ORPHAN_OUTPUT = "orphan_output"  # the state event of a success observed after CANCELED


class Verdict(StrEnum):
    KNOWN = "known"  # an attempt's job, booked as the provider says (or its task still runs)
    ADJUSTED = "adjusted"  # the provider charged more than the ledger booked: ADJUSTMENT
    REFUNDED = "refunded"  # the provider charged less: REFUND
    OUTPUT_AFTER_CANCEL = "output_after_cancel"  # a success after CANCELED: orphan output, cost booked
    STRAY = "stray"  # a job of an attempt's request key the attempt does not follow
    ORPHAN = "orphan"  # a job no attempt knows


class Finding(BaseModel):
    provider: str
    job_id: str
    request_key: str | None
    provider_status: str
    cost: float | None
    verdict: Verdict
    task_id: str | None = None
    attempt_no: int | None = None
    booked: float | None = None  # what this pass wrote (ADJUSTMENT, or REFUND as a positive amount)
    detail: str = ""


class Skipped(BaseModel):
    provider: str
    reason: str


class BackstopReport(BaseModel):
    since: datetime
    listed: int  # jobs the providers listed in the window
    known: int  # of them, jobs whose attempt and ledger agree (not listed in `findings`)
    findings: list[Finding]  # every other job, with what this pass did
    skipped: list[Skipped]  # providers not asked, and why


def reconcile(db: Database, providers: Mapping[str, VideoProvider], *, since: datetime,
              only: str | None = None) -> BackstopReport:
    """One pass over every provider that can list its jobs (or `only` that one)."""
    listed, known, findings, skipped = 0, 0, [], []
    for name in sorted(providers):
        if only is not None and name != only:
            continue
        provider = providers[name]
        reason = _cannot_list(provider)
        if reason:
            skipped.append(Skipped(provider=name, reason=reason))
            continue
        try:
            jobs = provider.list_jobs(since)  # type: ignore[attr-defined] - a JobLister
        except ProviderError as exc:
            skipped.append(Skipped(provider=name, reason=f"listing failed: {exc}"))
            continue
        listed += len(jobs)
        for job in jobs:
            with db.transaction() as session:
                finding = judge(session, name, job)
            if finding.verdict is Verdict.KNOWN:
                known += 1
            else:
                findings.append(finding)
    return BackstopReport(since=since, listed=listed, known=known, findings=findings, skipped=skipped)


def _cannot_list(provider: VideoProvider) -> str | None:
    missing = getattr(provider, "missing_setting", None)  # a property of hosted adapters
    if missing:
        return f"not configured ({missing} is not set)"
    if not isinstance(provider, JobLister):
        return "its API (or this adapter) offers no listing of jobs: only our own submits are known"
    return None


def judge(session: Session, provider: str, job: JobState) -> Finding:
    """What one listed job means for the ledger, and the rows it calls for (written once per job)."""
    cost = _cost(job)
    base = Finding(provider=provider, job_id=job.job_id, request_key=job.request_key,
                   provider_status=job.raw_status, cost=float(cost) if cost is not None else None,
                   verdict=Verdict.KNOWN)
    attempt = _attempt_of(session, provider, job)
    if attempt is not None and attempt.provider_job_id == job.job_id:
        return _own_job(session, base, attempt, job, cost, BACKSTOP)
    stray = session.scalar(select(StrayJob).where(StrayJob.provider == provider,
                                                  StrayJob.provider_job_id == job.job_id).with_for_update())
    if stray is None and attempt is not None and session.get(Task, attempt.task_id).status not in LEDGER_FINAL:
        # A job of a task still under way that its attempt has not recorded (a submit whose answer
        # was lost, a duplicate): the workflow reconciles it and books any stray itself. A row here
        # would count the job twice once the workflow records it.
        return base.model_copy(update={"task_id": attempt.task_id, "attempt_no": attempt.attempt_no,
                                       "detail": "task under way: its workflow reconciles it"})
    if stray is None:
        stray = _new_stray(session, provider, job, attempt)
    return _book_if_ended(session, base, stray, job, cost, attempt)


def _attempt_of(session: Session, provider: str, job: JobState) -> Attempt | None:
    """The attempt that knows the job: by its job id, else by our request key."""
    keys = [Attempt.provider_job_id == job.job_id]
    if job.request_key:
        keys.append(Attempt.request_key == job.request_key)
    rows = session.scalars(select(Attempt).where(Attempt.provider == provider, or_(*keys))).all()
    return next((a for a in rows if a.provider_job_id == job.job_id), rows[0] if rows else None)


def _new_stray(session: Session, provider: str, job: JobState, attempt: Attempt | None) -> StrayJob:
    session.execute(
        insert(StrayJob).values(
            task_id=attempt.task_id if attempt else None, attempt_no=attempt.attempt_no if attempt else None,
            provider=provider, provider_job_id=job.job_id, found_by=BACKSTOP, request_key=job.request_key,
            provider_status=job.raw_status, evidence=job.model_dump(mode="json"))
        .on_conflict_do_nothing(index_elements=["provider", "provider_job_id"])
    )
    return session.scalars(select(StrayJob).where(StrayJob.provider == provider,
                                                  StrayJob.provider_job_id == job.job_id).with_for_update()).one()


def _book_if_ended(session: Session, base: Finding, stray: StrayJob, job: JobState, cost: Decimal | None,
                   attempt: Attempt | None) -> Finding:
    """A stray (or orphan) is booked once its job ended, and, for a task's, once the task has ended
    (before that its workflow accounts its strays itself)."""
    stray.provider_status, stray.evidence, stray.updated_at = job.raw_status, job.model_dump(mode="json"), _now()
    finding = base.model_copy(update={"task_id": stray.task_id, "attempt_no": stray.attempt_no,
                                      "verdict": Verdict.ORPHAN if stray.task_id is None else Verdict.STRAY})
    if stray.accounted:
        return finding.model_copy(update={"verdict": Verdict.KNOWN}) if stray.found_by != BACKSTOP else finding
    task = session.get(Task, stray.task_id) if stray.task_id is not None else None
    if job.status not in TERMINAL_JOB_STATUSES:
        return finding.model_copy(update={"detail": f"still {job.raw_status}: booked once it ended"})
    if task is not None and task.status not in LEDGER_FINAL:
        return finding.model_copy(update={"detail": f"task {task.status}: its workflow accounts it"})
    amount = cost if cost is not None else Decimal(0)
    if task is None:
        note = (f"orphan {base.provider} job {job.job_id}: no attempt knows it (request key "
                f"{job.request_key or 'none'}); found by the provider backstop")
    elif attempt is not None and attempt.submit_state == AttemptState.ABANDONED.value:
        note = (f"first job of attempt {stray.attempt_no}, whose duplicate risk was accepted: found by the "
                "provider backstop")
    else:
        note = f"job of attempt {stray.attempt_no} its workflow did not follow: found by the provider backstop"
    book_stray(session, stray, amount, note)
    return finding.model_copy(update={"booked": float(amount), "detail": note})


def record_late_success(session: Session, provider: str, event: WebhookEvent) -> Finding | None:
    """A success webhook whose workflow has closed (the gateway, after its signal found none): if it
    is an attempt's own job and the task ended CANCELED, the job is judged as the backstop judges
    it from a listing, with the webhook's body as the evidence; None otherwise (a late copy of a
    success the workflow saw itself is left to the listing, which compares costs)."""
    if event.status is not JobStatus.SUCCEEDED:
        return None
    attempt = session.scalar(select(Attempt).where(Attempt.provider == provider,
                                                   Attempt.provider_job_id == event.job_id))
    if attempt is None or session.get(Task, attempt.task_id).status != TaskStatus.CANCELED.value:
        return None
    job = JobState(provider=provider, job_id=event.job_id, request_key=event.request_key, status=event.status,
                   raw_status=event.raw_status or event.status.value, outputs=[OutputRef(url=u) for u in event.outputs],
                   usage=Usage(cost=event.cost) if event.cost is not None else None, updated_at=event.observed_at)
    cost = _cost(job)
    base = Finding(provider=provider, job_id=job.job_id, request_key=job.request_key,
                   provider_status=job.raw_status, cost=float(cost) if cost is not None else None,
                   verdict=Verdict.KNOWN)
    return _own_job(session, base, attempt, job, cost, LATE_WEBHOOK)


def _own_job(session: Session, base: Finding, attempt: Attempt, job: JobState, cost: Decimal | None,
             found_by: str) -> Finding:
    """An attempt's own job once its task ended: the ledger's cost for the attempt is the provider's.
    A success after CANCELED is an orphan output, flagged whoever sees it first (a listing, a late
    webhook); without the provider's cost it is booked at the task's estimate if nothing is booked
    for it yet, and a listing that gives the cost later corrects that with an ADJUSTMENT or REFUND.
    Each finder books under its own key per job, always the difference from what the ledger holds,
    so a redelivery or a second pass books nothing more."""
    task = session.get(Task, attempt.task_id)
    found = base.model_copy(update={"task_id": task.id, "attempt_no": attempt.attempt_no})
    if task.status not in LEDGER_FINAL or job.status not in TERMINAL_JOB_STATUSES:
        return found
    late_output = task.status == TaskStatus.CANCELED.value and job.status is JobStatus.SUCCEEDED
    if late_output:
        _flag_output_after_cancel(session, task, attempt, job, found_by)
    elif cost is None:
        return found
    booked = _booked_for(session, attempt, job.job_id)
    if cost is not None:
        diff, said = cost - booked, f"the provider charged {fmt_amount(cost)}"
    elif booked == 0:  # a late output whose charge nobody has said yet
        diff = Decimal(task.estimated_cost).quantize(CENT)
        said = f"the provider's charge is unknown: the task's estimate {fmt_amount(diff)} is booked"
    else:
        diff, said = Decimal(0), ""
    if diff == 0:
        return found.model_copy(update={"verdict": Verdict.OUTPUT_AFTER_CANCEL}) if late_output else found
    reason = f"{said} for job {job.job_id} ({job.raw_status}), the ledger held {fmt_amount(booked)} for attempt " \
             f"{attempt.attempt_no}"
    if late_output:
        reason += f"; an output that came after the task ended CANCELED (found by the {found_by})"
    kind, key = ("ADJUSTMENT", "adjustment") if diff > 0 else ("REFUND", "refund")
    # the job id is what _booked_for reads back; the key is not a stray's, so spend counts the row as
    # the task's own charge, never as a duplicate job (schema/strays.py: STRAY_ADJUSTMENT)
    session.execute(
        insert(CreditEntry)
        .values(tenant_id=task.tenant_id, task_id=task.id, entry_type=kind, amount=abs(diff),
                business_key=f"{key}:{task.id}:{found_by}:{job.job_id}", attempt_no=attempt.attempt_no,
                provider_job_id=job.job_id, run_no=task.run_no, note=reason)
        .on_conflict_do_nothing(index_elements=["business_key"])
    )
    verdict = Verdict.OUTPUT_AFTER_CANCEL if late_output else (Verdict.ADJUSTED if diff > 0 else Verdict.REFUNDED)
    return found.model_copy(update={"verdict": verdict, "booked": float(abs(diff)), "detail": reason})


def _booked_for(session: Session, attempt: Attempt, job_id: str) -> Decimal:
    """What the ledger charged for one attempt's job: the attempt's share of what its workflow settled,
    and the corrections booked for that job since (the ADJUSTMENTs of other jobs, its strays, are theirs)."""
    corrections = dict(session.execute(
        select(CreditEntry.entry_type, func.sum(CreditEntry.amount))
        .where(CreditEntry.task_id == attempt.task_id, CreditEntry.provider_job_id == job_id,
               CreditEntry.entry_type.in_(("ADJUSTMENT", "REFUND")))
        .group_by(CreditEntry.entry_type)
    ).all())
    share = _settled_by_attempt(session, attempt.task_id).get(attempt.attempt_no, Decimal(0))
    return share + Decimal(corrections.get("ADJUSTMENT", 0)) - Decimal(corrections.get("REFUND", 0))


def _settled_by_attempt(session: Session, task_id: str) -> dict[int, Decimal]:
    """Each attempt's share of what the task's workflow settled (its SETTLE, ADJUSTMENTs and REFUNDs
    that name no job). A run settles all its attempts in one SETTLE naming the last one, so the rows
    alone would put a regenerated task's whole charge on its last attempt: each attempt's share is the
    cost its row recorded from the provider when those costs add up to what was settled, else (a
    ledger closed by other means, an operator's) what the rows naming the attempt hold."""
    by_rows: dict[int, Decimal] = {}
    for attempt_no, kind, total in session.execute(
        select(CreditEntry.attempt_no, CreditEntry.entry_type, func.sum(CreditEntry.amount))
        .where(CreditEntry.task_id == task_id, CreditEntry.provider_job_id.is_(None),
               CreditEntry.entry_type.in_(("SETTLE", "ADJUSTMENT", "REFUND")))
        .group_by(CreditEntry.attempt_no, CreditEntry.entry_type)
    ).all():
        amount = Decimal(total) if kind != "REFUND" else -Decimal(total)
        by_rows[attempt_no or 0] = by_rows.get(attempt_no or 0, Decimal(0)) + amount
    recorded = {attempt_no: Decimal(str((usage or {}).get("cost") or 0)).quantize(CENT)
                for attempt_no, usage in session.execute(
                    select(Attempt.attempt_no, Attempt.usage).where(Attempt.task_id == task_id)).all()}
    return recorded if sum(recorded.values()) == sum(by_rows.values()) else by_rows


def _flag_output_after_cancel(session: Session, task: Task, attempt: Attempt, job: JobState, found_by: str) -> None:
    """A success the provider reports for a task that ended CANCELED: kept as an orphan output (the
    provider's view of the job as evidence) and as an unapplied state event a person sees in `show`,
    both once per job whoever finds it; the status stays CANCELED (terminal states are sticky). The
    orphan's row is locked until the booking commits, so a listing and a webhook book one after
    the other."""
    cost = _cost(job)
    inserted = session.scalar(
        insert(StrayJob).values(
            task_id=task.id, attempt_no=attempt.attempt_no, provider=attempt.provider, provider_job_id=job.job_id,
            found_by=found_by, request_key=job.request_key, provider_status=job.raw_status,
            evidence=job.model_dump(mode="json"), accounted=True, cost=cost)
        .on_conflict_do_nothing(index_elements=["provider", "provider_job_id"])
        .returning(StrayJob.id)
    )
    stray = session.scalars(select(StrayJob).where(StrayJob.provider == attempt.provider,
                                                   StrayJob.provider_job_id == job.job_id).with_for_update()).one()
    if inserted is None:
        if cost is not None:
            stray.cost, stray.updated_at = cost, _now()
        return
    session.execute(
        insert(StateEvent).values(
            task_id=task.id, attempt_no=attempt.attempt_no, source=found_by,
            source_event_id=f"{ORPHAN_OUTPUT}:{attempt.provider}:{job.job_id}", event=ORPHAN_OUTPUT,
            from_status=task.status, to_status=task.status, task_version=task.version, applied=False,
            payload={"job_id": job.job_id, "provider_status": job.raw_status,
                     "outputs": [o.url for o in job.outputs], "cost": float(cost) if cost is not None else None,
                     "attention": "a paid output arrived after the task ended CANCELED"})
        .on_conflict_do_nothing(index_elements=["source", "source_event_id"])
    )


def _cost(job: JobState) -> Decimal | None:
    if job.usage is None or job.usage.cost is None:
        return None
    return Decimal(str(job.usage.cost)).quantize(CENT)


def _now() -> datetime:
    return datetime.now(UTC)


async def run_periodically(db: Database, providers: Mapping[str, VideoProvider], stop: asyncio.Event, *,
                           every_s: float, window: timedelta) -> None:
    """Until `stop`: a pass every `every_s` (the io worker's backstop), the first one `every_s` after
    start (a worker that restarts often does not list the providers' jobs each time). A failed pass is
    logged and tried again at the next tick; a job a pass misses is listed again while it is in the window."""
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s)
        if stop.is_set():
            return
        try:
            report = await asyncio.to_thread(reconcile, db, providers, since=_now() - window)
            for f in report.findings:
                log.warning("backstop: %s job %s %s (task %s): %s", f.provider, f.job_id, f.verdict.value,
                            f.task_id or "none", f.detail)
            for s in report.skipped:
                if s.reason.startswith("listing failed"):
                    log.warning("backstop: %s not checked: %s", s.provider, s.reason)
        except Exception:  # noqa: BLE001 - the backstop outlives any one failure
            log.exception("provider backstop pass failed; retrying in %.0f s", every_s)


def window_start(hours: float | None, now: datetime | None = None) -> datetime:
    """The start of the listing window: `hours` back from now (the default window without)."""
    span = timedelta(hours=hours) if hours is not None else DEFAULT_WINDOW
    return (now or _now()) - span
