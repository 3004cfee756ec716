"""The record of every moderation judgement (moderation_judgements): written once per idempotency key,
read per tenant. Every query carries the tenant: an unguessable subject id is not authorization.

The key names the step and what it judged, e.g. `{task}:run{n}:input:{moderator}:prompt`: a step
that runs again after a crash (a Temporal retry, a SIGKILLed worker) writes nothing new and gets
the first row back, whatever the moderator answers the second time, so what the task acted on is
what the record shows.
"""

from __future__ import annotations

from typing import Literal

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from contracts.moderation import Gate, Judgement
from schema.models import ModerationJudgement

SubjectKind = Literal["task", "asset"]


class KeyOfAnotherTenant(RuntimeError):
    """The idempotency key is already recorded for another tenant: a caller built keys that collide."""


def record_judgement(session: Session, *, tenant_id: str, subject_kind: SubjectKind, subject_id: str, gate: Gate,
                     judgement: Judgement, idempotency_key: str) -> ModerationJudgement:
    """Insert the judgement unless its key is recorded; return the stored row either way."""
    session.execute(
        insert(ModerationJudgement)
        .values(tenant_id=tenant_id, subject_kind=subject_kind, subject_id=subject_id,
                content_kind=judgement.subject_kind, gate=Gate(gate).value, moderator=judgement.moderator,
                model_version=judgement.model_version, verdict=judgement.verdict.value,
                categories=list(judgement.categories), scores=judgement.scores,
                latency_ms=round(judgement.latency_ms), evidence=judgement.evidence.model_dump(mode="json"),
                idempotency_key=idempotency_key)
        .on_conflict_do_nothing(index_elements=["idempotency_key"])
    )
    row = session.scalar(select(ModerationJudgement).where(ModerationJudgement.idempotency_key == idempotency_key,
                                                           ModerationJudgement.tenant_id == tenant_id))
    if row is None:
        raise KeyOfAnotherTenant(f"judgement key {idempotency_key!r} is recorded for another tenant")
    return row


def judgements_for(session: Session, tenant_id: str, subject_kind: SubjectKind, subject_id: str,
                   gate: Gate | None = None) -> list[ModerationJudgement]:
    """The tenant's judgements on one subject, oldest first (optionally one gate's)."""
    stmt = select(ModerationJudgement).where(ModerationJudgement.tenant_id == tenant_id,
                                             ModerationJudgement.subject_kind == subject_kind,
                                             ModerationJudgement.subject_id == subject_id)
    if gate is not None:
        stmt = stmt.where(ModerationJudgement.gate == Gate(gate).value)
    return list(session.scalars(stmt.order_by(ModerationJudgement.created_at, ModerationJudgement.id)))
