"""Booking a provider job no attempt follows (a stray_jobs row): its cost as an ADJUSTMENT carrying
the job id, once per job. Used by the workflow's stray accounting (activities/poll.py) and by the
provider backstop (control/provider_backstop.py), so both write the same business key.

That key is what makes an ADJUSTMENT duplicate waste (STRAY_ADJUSTMENT): the backstop's corrections
of an attempt's own job carry the job id as well (`adjustment:{task}:backstop:{job}`, `...:webhook:`),
and they are what the task's own job cost."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from sqlalchemy import ColumnElement, and_
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from schema.models import CreditEntry, StrayJob, Task

# A ledger row (`{row}`: its table or alias) booked by book_stray for a task: a duplicate job. The same
# rule is frozen in migration 0020's triggers; tests/unit/test_import_totals_columns.py holds them equal.
STRAY_ADJUSTMENT = ("{row}.entry_type = 'ADJUSTMENT' AND {row}.provider_job_id IS NOT NULL "
                    "AND {row}.business_key = 'adjustment:' || {row}.task_id || ':job:' || {row}.provider_job_id")


def unaccounted(task_id: str) -> ColumnElement[bool]:
    """The task's duplicate jobs not accounted yet (not cancelled and costed): what must be settled
    before its ledger closes, and what keeps its route pinned."""
    return and_(StrayJob.task_id == task_id, StrayJob.accounted.is_(False))


def stray_key(stray: StrayJob) -> str:
    """The ADJUSTMENT's business key: per task and job, or per provider and job for an orphan."""
    owner = stray.task_id if stray.task_id is not None else f"orphan:{stray.provider}"
    return f"adjustment:{owner}:job:{stray.provider_job_id}"


def book_stray(session: Session, stray: StrayJob, cost: Decimal, note: str) -> None:
    """Mark the job accounted and record its cost as an ADJUSTMENT carrying its job id (once: the
    business key is per job). An orphan's ADJUSTMENT has no task and no tenant: nobody asked for it."""
    task = session.get(Task, stray.task_id) if stray.task_id is not None else None
    stray.cost, stray.accounted, stray.updated_at = cost, True, datetime.now(UTC)
    session.execute(
        insert(CreditEntry)
        .values(tenant_id=task.tenant_id if task else None, task_id=task.id if task else None,
                entry_type="ADJUSTMENT", amount=cost, business_key=stray_key(stray), attempt_no=stray.attempt_no,
                provider_job_id=stray.provider_job_id, run_no=task.run_no if task else 1, note=note)
        .on_conflict_do_nothing(index_elements=["business_key"])
    )
