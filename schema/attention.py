"""The attention queue: NEEDS_ATTENTION tasks with what an operator needs to decide on each.

A task waits there when the workflow could not learn a provider job's fate (an unknown submit the
provider cannot be asked about, a job that never answers or cannot be cancelled). The decision is
the `resolve` update (control/resolve.py); this module only reads the evidence from Postgres: the
latest needs_attention event, every attempt, the task's last error and the credit still held.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from decimal import Decimal
from typing import Any

from pydantic import BaseModel
from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from contracts.task import TaskEvent, TaskStatus
from schema.import_scope import in_import
from schema.models import Attempt, CreditEntry, StateEvent, Task


class AttemptEvidence(BaseModel):
    attempt_no: int
    submit_state: str
    provider_job_id: str | None
    provider_status: str | None
    error: str | None


class AttentionTask(BaseModel):
    task_id: str
    import_id: str
    product_id: str
    workflow_id: str
    since: datetime | None  # when the task entered NEEDS_ATTENTION (its latest needs_attention event)
    stuck: str | None  # the step waiting for a decision: reconcile, poll, cancel or stray
    evidence: str | None
    job_id: str | None  # the live job the workflow was following, if any
    unknown_attempt: int | None  # the attempt whose submit outcome is unknown, if any
    strays: list[str] = []  # duplicate jobs the provider refuses to answer for (stuck at stray)
    last_error: str | None
    credit_held: float  # RESERVE - SETTLE - RELEASE (credits are floats in every --json output)
    attempts: list[AttemptEvidence]


def needs_attention(session: Session, import_id: str | None = None) -> list[AttentionTask]:
    """Every NEEDS_ATTENTION task (of `import_id`, if given), oldest decision first."""
    stmt = select(Task).where(Task.status == TaskStatus.NEEDS_ATTENTION.value)
    if import_id is not None:
        stmt = stmt.where(in_import(import_id))
    tasks = session.scalars(stmt).all()
    if not tasks:
        return []
    ids = [t.id for t in tasks]
    events = _latest_events(session, ids)
    held = _held(session, ids)
    attempts: dict[str, list[AttemptEvidence]] = defaultdict(list)
    for a in session.scalars(select(Attempt).where(Attempt.task_id.in_(ids)).order_by(Attempt.attempt_no)):
        attempts[a.task_id].append(AttemptEvidence(
            attempt_no=a.attempt_no, submit_state=a.submit_state, provider_job_id=a.provider_job_id,
            provider_status=a.provider_status, error=a.error_message))
    out = []
    for t in tasks:
        since, payload = events.get(t.id, (None, {}))
        out.append(AttentionTask(
            task_id=t.id, import_id=t.import_id, product_id=t.product_id, workflow_id=t.workflow_id, since=since,
            stuck=payload.get("stuck"), evidence=payload.get("evidence"), job_id=payload.get("job_id"),
            unknown_attempt=payload.get("unknown_attempt"), strays=payload.get("strays") or [], last_error=t.last_error,
            credit_held=float(held.get(t.id, 0)), attempts=attempts[t.id]))
    return sorted(out, key=lambda a: (a.since is None, a.since or datetime.min, a.task_id))


def _latest_events(session: Session, ids: list[str]) -> dict[str, tuple[datetime, dict[str, Any]]]:
    latest = (
        select(func.max(StateEvent.id))
        .where(StateEvent.task_id.in_(ids), StateEvent.event == TaskEvent.NEEDS_ATTENTION.value,
               StateEvent.applied.is_(True))
        .group_by(StateEvent.task_id)
    )
    stmt = select(StateEvent.task_id, StateEvent.created_at, StateEvent.payload).where(StateEvent.id.in_(latest))
    return {task_id: (at, payload or {}) for task_id, at, payload in session.execute(stmt)}


def _held(session: Session, ids: list[str]) -> dict[str, Decimal]:
    sign = case((CreditEntry.entry_type == "RESERVE", 1), (CreditEntry.entry_type.in_(("SETTLE", "RELEASE")), -1),
                else_=0)
    stmt = (select(CreditEntry.task_id, func.sum(sign * CreditEntry.amount))
            .where(CreditEntry.task_id.in_(ids)).group_by(CreditEntry.task_id))
    return {task_id: Decimal(amount or 0) for task_id, amount in session.execute(stmt)}
