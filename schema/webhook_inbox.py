"""The webhook inbox (table provider_events): persist first, match to a task, claim orphans.

Only database work, no outside calls: the gateway signals the workflow after the transaction
closed, and the submit activity claims orphans inside the transaction that records the job.

Matching and claiming race: the gateway may look for an event's job while the submit that records
that job is committing. Both take the same transaction-scoped advisory locks (one per provider job
id, one per request key, in a fixed order) before they look, so either the gateway sees the
recorded job (matched) or the submit sees the stored orphan (claimed): an event is never left
behind as an orphan of a recorded job.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel
from sqlalchemy import func, or_, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from contracts.messages import ProviderUpdate
from contracts.provider import WebhookEvent
from schema.models import Attempt, ProviderEvent, Task


class EventState(StrEnum):
    MATCHED = "matched"
    ORPHAN = "orphan"  # no attempt had recorded its job when it came
    EXPIRED = "expired"  # an orphan nobody claimed within the TTL


class MatchedBy(StrEnum):
    JOB_ID = "job_id"  # on arrival, by the attempt's recorded provider job id
    REQUEST_KEY = "request_key"  # on arrival, by our request key echoed by the provider
    SUBMIT = "submit"  # an orphan claimed by the submit that recorded its job (early_updates)
    RECONCILE = "reconcile"  # an orphan claimed by the reconcile that found its job


SIGNALED_ON_ARRIVAL = (MatchedBy.JOB_ID.value, MatchedBy.REQUEST_KEY.value)
CLAIMED = (MatchedBy.SUBMIT.value, MatchedBy.RECONCILE.value)  # handed to the workflow in an activity result


@dataclass(frozen=True)
class Receipt:
    """What storing one delivery did; `workflow_id` is set when its workflow is still to be signaled,
    and then its task (`tenant_id`, `task_id`): the gateway may record the news there instead."""

    row_id: int
    state: EventState
    duplicate: bool
    workflow_id: str | None = None
    tenant_id: str | None = None
    task_id: str | None = None


class OrphanCounts(BaseModel):
    orphans: int  # unmatched and younger than the TTL: a submit may still claim them
    expired: int  # unmatched and older


def to_update(event: WebhookEvent) -> ProviderUpdate:
    """The signal's payload: what the workflow learns from one webhook."""
    return ProviderUpdate(
        job_id=event.job_id, status=event.status, raw_status=event.raw_status, progress=event.progress,
        event_id=event.event_id, observed_at=event.observed_at, verified=event.verified,
    )


def record_event(session: Session, provider: str, event: WebhookEvent, raw_body: bytes) -> Receipt:
    """Insert the event once per (provider, event id), matched to its task when its job is known."""
    _lock(session, provider, event.job_id, event.request_key)
    target = _find_target(session, provider, event)
    now = datetime.now(UTC)
    row_id = session.scalar(
        insert(ProviderEvent)
        .values(
            provider=provider, event_id=event.event_id, verified=event.verified, provider_job_id=event.job_id,
            request_key=event.request_key, task_id=target.task_id if target else None,
            state=(EventState.MATCHED if target else EventState.ORPHAN).value,
            matched_by=target.by.value if target else None, matched_at=now if target else None,
            payload=to_update(event).model_dump(mode="json"), headers=event.headers,
            raw_body=raw_body.decode("utf-8", errors="replace"), observed_at=event.observed_at,
        )
        .on_conflict_do_nothing(index_elements=["provider", "event_id"])
        .returning(ProviderEvent.id)
    )
    if row_id is not None:
        state = EventState.MATCHED if target else EventState.ORPHAN
        news = target is not None and not _status_signaled(session, provider, event.job_id, event.status)
        return _receipt(row_id, state, duplicate=False, to_signal=target if news else None)
    existing = session.scalars(
        select(ProviderEvent).where(ProviderEvent.provider == provider, ProviderEvent.event_id == event.event_id)
    ).one()
    return _receipt(existing.id, EventState(existing.state), duplicate=True, to_signal=_unsignaled(session, existing))


def _receipt(row_id: int, state: EventState, *, duplicate: bool, to_signal: _Task | None) -> Receipt:
    if to_signal is None:
        return Receipt(row_id, state, duplicate)
    return Receipt(row_id, state, duplicate, workflow_id=to_signal.workflow_id, tenant_id=to_signal.tenant_id,
                   task_id=to_signal.task_id)


def mark_signaled(session: Session, row_id: int) -> None:
    session.execute(
        update(ProviderEvent).where(ProviderEvent.id == row_id, ProviderEvent.signaled_at.is_(None))
        .values(signaled_at=datetime.now(UTC))
    )


def claim_orphans(
    session: Session, *, provider: str, task_id: str, job_id: str, request_key: str | None, by: MatchedBy
) -> None:
    """Match the orphans of a job just recorded (by its id or our request key) to its task. Call it
    in the transaction that records the job id, after that write."""
    _lock(session, provider, job_id, request_key)
    keys = [ProviderEvent.provider_job_id == job_id]
    if request_key:
        keys.append(ProviderEvent.request_key == request_key)
    session.execute(
        update(ProviderEvent)
        .where(ProviderEvent.provider == provider, ProviderEvent.state == EventState.ORPHAN.value, or_(*keys))
        .values(state=EventState.MATCHED.value, task_id=task_id, matched_by=by.value, matched_at=datetime.now(UTC))
    )


def claimed_updates(session: Session, *, provider: str, job_id: str) -> list[ProviderUpdate]:
    """The job's events claimed as orphans (by its submit or its reconcile), oldest first (the
    newest last): the workflow never saw them, since no task held the job when they came."""
    payloads = session.scalars(
        select(ProviderEvent.payload)
        .where(ProviderEvent.provider == provider, ProviderEvent.provider_job_id == job_id,
               ProviderEvent.matched_by.in_(CLAIMED))
        .order_by(ProviderEvent.observed_at.asc().nulls_first(), ProviderEvent.id)
    )
    return [ProviderUpdate.model_validate(p) for p in payloads]


def expire_orphans(session: Session, ttl_s: float) -> int:
    """Mark orphans older than the TTL expired; how many were."""
    cutoff = datetime.now(UTC) - timedelta(seconds=ttl_s)
    result = session.execute(
        update(ProviderEvent)
        .where(ProviderEvent.state == EventState.ORPHAN.value, ProviderEvent.received_at < cutoff)
        .values(state=EventState.EXPIRED.value),
        execution_options={"synchronize_session": False},
    )
    return result.rowcount


def orphan_counts(session: Session, ttl_s: float) -> OrphanCounts:
    """Unmatched events; an orphan past the TTL counts as expired even before it is marked so."""
    cutoff = datetime.now(UTC) - timedelta(seconds=ttl_s)
    state, age = ProviderEvent.state, ProviderEvent.received_at
    orphans, expired = session.execute(
        select(
            func.count().filter(state == EventState.ORPHAN.value, age >= cutoff),
            func.count().filter(or_(state == EventState.EXPIRED.value, age < cutoff)),
        ).where(state.in_([EventState.ORPHAN.value, EventState.EXPIRED.value]))
    ).one()
    return OrphanCounts(orphans=orphans, expired=expired)


@dataclass(frozen=True)
class _Task:
    task_id: str
    tenant_id: str
    workflow_id: str


@dataclass(frozen=True)
class _Target(_Task):
    by: MatchedBy


def _find_target(session: Session, provider: str, event: WebhookEvent) -> _Target | None:
    """The task whose attempt recorded this job; by our request key only once that attempt recorded
    a job (a job of the same request that is not the recorded one still concerns that task)."""
    base = (
        select(Attempt.task_id, Task.tenant_id, Task.workflow_id).join(Task, Task.id == Attempt.task_id)
        .where(Attempt.provider == provider).limit(1)
    )
    row = session.execute(base.where(Attempt.provider_job_id == event.job_id)).first()
    if row is not None:
        return _Target(row.task_id, row.tenant_id, row.workflow_id, MatchedBy.JOB_ID)
    if event.request_key:
        row = session.execute(
            base.where(Attempt.request_key == event.request_key, Attempt.provider_job_id.is_not(None))
        ).first()
        if row is not None:
            return _Target(row.task_id, row.tenant_id, row.workflow_id, MatchedBy.REQUEST_KEY)
    return None


def _status_signaled(session: Session, provider: str, job_id: str, status: str | None) -> bool:
    """Whether an earlier event already told the workflow this job's status: a chatty provider
    (progress, logs) is stored in full, but the workflow's history gets one signal per status."""
    if status is None:
        return False
    return session.scalar(
        select(ProviderEvent.id).where(
            ProviderEvent.provider == provider, ProviderEvent.provider_job_id == job_id,
            ProviderEvent.signaled_at.is_not(None), ProviderEvent.payload["status"].astext == str(status),
        ).limit(1)
    ) is not None


def _unsignaled(session: Session, row: ProviderEvent) -> _Task | None:
    """The task and workflow of an event matched on arrival whose signal never went out (the first delivery
    found Temporal unavailable): a retried delivery sends it, unless another event has told the
    workflow the same status meanwhile (or had already, when this one was stored and not sent)."""
    if row.state != EventState.MATCHED.value or row.matched_by not in SIGNALED_ON_ARRIVAL or row.signaled_at:
        return None
    if _status_signaled(session, row.provider, row.provider_job_id, (row.payload or {}).get("status")):
        return None
    task = session.execute(select(Task.tenant_id, Task.workflow_id).where(Task.id == row.task_id)).first()
    return _Task(row.task_id, task.tenant_id, task.workflow_id) if task is not None else None


def _lock(session: Session, provider: str, job_id: str, request_key: str | None) -> None:
    """Transaction-scoped advisory locks on the event's job and request key, always in one order."""
    keys = [f"webhook:{provider}:job:{job_id}"]
    if request_key:
        keys.append(f"webhook:{provider}:key:{request_key}")
    for key in sorted(keys):
        session.execute(select(func.pg_advisory_xact_lock(func.hashtextextended(key, 0))))
