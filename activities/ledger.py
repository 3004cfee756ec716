"""Credit ledger steps: reserve before submit; settle what providers charged and release the rest.

Append-only rows, each with a unique business key, so a repeated activity adds nothing:
RESERVE = SETTLE + RELEASE for every finished task; a cost above the reservation, or the cost of a
duplicate provider job, is an ADJUSTMENT (docs/architecture.md, "Money").
"""

from __future__ import annotations

from decimal import Decimal

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session
from temporalio import activity

from activities.errors import INSUFFICIENT_CREDIT, business_failure, classified
from activities.failpoints import failpoint
from schema.contracts import LedgerResult, SettleInput, TaskRef, run_suffix
from schema.db import Database
from schema.models import CreditEntry, Task, Tenant
from schema.task_store import TaskNotFound

CENT = Decimal("0.000001")


class LedgerActivities:
    def __init__(self, db: Database):
        self.db = db

    @activity.defn(name="reserve_credit")
    @classified
    def reserve_credit(self, ref: TaskRef) -> LedgerResult:
        with self.db.transaction() as session:
            task = session.get(Task, ref.task_id)
            if task is None:
                raise TaskNotFound(ref.task_id)
            reserve_key = f"reserve:{task.id}{run_suffix(ref.run)}"
            if _entry(session, reserve_key) is None:
                # Serialize reservations per tenant: the balance check and the insert must agree.
                tenant = session.scalar(select(Tenant).where(Tenant.id == task.tenant_id).with_for_update())
                available = tenant.credit_limit - _committed(session, task.tenant_id)
                if available < task.estimated_cost:
                    raise business_failure(
                        f"tenant {task.tenant_id} has {available} credits, task needs {task.estimated_cost}",
                        INSUFFICIENT_CREDIT,
                    )
                _append(session, task, "RESERVE", task.estimated_cost, reserve_key, run_no=ref.run)
            return balance(session, task.id, ref.run)

    @activity.defn(name="settle")
    @classified
    def settle(self, req: SettleInput) -> LedgerResult:
        """Close the task's reservation: settle what the provider charged (capped at the
        reservation; the excess is an ADJUSTMENT) and release the rest. Nothing charged and nothing
        reserved writes nothing. After review closed the reservation, a regenerated attempt's cost is
        an ADJUSTMENT of its own."""
        failpoint("before_settle")
        with self.db.transaction() as session:
            task = session.get(Task, req.task_id)
            if task is None:
                raise TaskNotFound(req.task_id)
            run = run_suffix(req.run)
            cost = Decimal(str(req.cost)).quantize(CENT)
            if req.after_review:
                if cost > 0:
                    _append(session, task, "ADJUSTMENT", cost, f"adjustment:{task.id}{run}:review:{req.attempt_no}",
                            req.attempt_no, note="attempt regenerated at review", run_no=req.run)
                return balance(session, task.id, req.run)
            reserved = _amount(session, f"reserve:{req.task_id}{run}")
            settled = min(cost, reserved)
            if settled > 0:
                _append(session, task, "SETTLE", settled, f"settle:{task.id}{run}", req.attempt_no, run_no=req.run)
            if reserved - settled > 0:
                _append(session, task, "RELEASE", reserved - settled, f"release:{task.id}{run}", req.attempt_no,
                        note=req.reason or None, run_no=req.run)
            if cost > reserved:
                _append(session, task, "ADJUSTMENT", cost - reserved, f"adjustment:{task.id}:{req.attempt_no}",
                        req.attempt_no, note="provider cost above reservation", run_no=req.run)
            return balance(session, task.id, req.run)


def _entry(session: Session, key: str) -> CreditEntry | None:
    return session.scalar(select(CreditEntry).where(CreditEntry.business_key == key))


def _amount(session: Session, key: str) -> Decimal:
    entry = _entry(session, key)
    return entry.amount if entry else Decimal(0)


def _append(
    session: Session, task: Task, entry_type: str, amount: Decimal, key: str, attempt_no: int | None = None,
    note: str | None = None, run_no: int = 1,
) -> None:
    session.execute(
        insert(CreditEntry)
        .values(tenant_id=task.tenant_id, task_id=task.id, entry_type=entry_type, amount=amount,
                business_key=key, attempt_no=attempt_no, note=note, run_no=run_no)
        .on_conflict_do_nothing(index_elements=["business_key"])
    )


def _committed(session: Session, tenant_id: str) -> Decimal:
    """Credits not available to new work: held reservations plus spending."""
    sums = dict(
        session.execute(
            select(CreditEntry.entry_type, func.coalesce(func.sum(CreditEntry.amount), 0))
            .where(CreditEntry.tenant_id == tenant_id)
            .group_by(CreditEntry.entry_type)
        ).all()
    )
    get = lambda k: Decimal(sums.get(k, 0))  # noqa: E731
    return get("RESERVE") - get("RELEASE") + get("ADJUSTMENT") - get("REFUND")


def balance(session: Session, task_id: str, run: int = 1) -> LedgerResult:
    sums = dict(
        session.execute(
            select(CreditEntry.entry_type, func.sum(CreditEntry.amount))
            .where(CreditEntry.task_id == task_id, CreditEntry.run_no == run)
            .group_by(CreditEntry.entry_type)
        ).all()
    )
    return LedgerResult(
        reserved=float(sums.get("RESERVE", 0)), settled=float(sums.get("SETTLE", 0)),
        released=float(sums.get("RELEASE", 0)), adjusted=float(sums.get("ADJUSTMENT", 0)),
    )
