"""Credit ledger steps: reserve before submit; settle what providers charged and release the rest.

Append-only rows, each with a unique business key, so a repeated activity adds nothing:
RESERVE = SETTLE + RELEASE for every finished task; a cost above the reservation, or the cost of a
duplicate provider job, is an ADJUSTMENT (docs/architecture.md, "Money").
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from decimal import Decimal

from sqlalchemy import select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session
from temporalio import activity

from activities.errors import INSUFFICIENT_CREDIT, business_failure, classified
from activities.failpoints import failpoint
from activities.tasks import Applied, apply_moves, moved
from contracts.messages import LedgerResult, SettleInput, TaskRef, run_suffix
from metrics import CREDIT_SPENT
from schema.db import Database
from schema.ledger_keys import Hold, held_attempt, hold_key, later_close_key, route_holds_prefix
from schema.models import Attempt, CreditEntry
from schema.state_machine import AttemptState
from schema.task_store import TaskNotFound

CENT = Decimal("0.000001")
SPENDING = ("SETTLE", "ADJUSTMENT")  # what a tenant was charged (reelqueue_credit_spent_total)


class LedgerActivities:
    def __init__(self, db: Database, unlisted: Collection[str] = ()):
        """`unlisted`: the providers whose jobs the provider backstop cannot list (it never finds a
        job of theirs we lost track of)."""
        self.db = db
        self.unlisted = frozenset(unlisted)

    @activity.defn(name="reserve_credit")
    @classified
    def reserve_credit(self, ref: TaskRef) -> LedgerResult:
        """Hold the task's estimate; the moves the request carries (transition-in-work-v1: the task
        becomes QUEUED) are committed with the hold, and none without it. With `hold_for_attempt`, one
        more estimate held for that attempt (its RESERVE names it and why, `ref.hold`; settle closes every
        hold of the run)."""
        with self.db.transaction() as session:
            ledger = _TaskLedger.read(session, ref.task_id, ref.run)
            short = _hold_estimate(session, ledger, ref)
            if short is not None:
                raise business_failure(short, INSUFFICIENT_CREDIT)
            done = apply_moves(session, ref.moves)
            balance = ledger.balance()
        return balance.model_copy(update={"moved": moved(done)})

    @staticmethod
    def hold(session: Session, ref: TaskRef) -> str | None:
        """reserve_credit's hold in the caller's transaction (the prepare step's, lean-path-v1); why not
        when the tenant's credit cannot cover it."""
        return _hold_estimate(session, _TaskLedger.read(session, ref.task_id, ref.run), ref)

    def close(self, session: Session, req: SettleInput) -> tuple[LedgerResult, Applied]:
        """settle's rows and moves in the caller's transaction (also the media step's last, lean-path-v1);
        the caller reports the moves with `moved` once committed."""
        ledger = _TaskLedger.read(session, req.task_id, req.run)
        ledger.append(session, _closing(req, ledger) + _unverifiable_risks(session, req, ledger, self.unlisted))
        return ledger.balance(), apply_moves(session, req.moves)

    @activity.defn(name="settle")
    @classified
    def settle(self, req: SettleInput) -> LedgerResult:
        """Close the task's reservation: settle what the provider charged (capped at the
        reservation; the excess is an ADJUSTMENT) and release the rest. Nothing charged and nothing
        reserved writes nothing. After review closed the reservation, a regenerated attempt's cost is
        an ADJUSTMENT of its own. The moves the request carries (transition-in-work-v2: the task's
        ending) are committed with the ledger's rows."""
        failpoint("before_settle")
        with self.db.transaction() as session:
            balance, done = self.close(session, req)
        return balance.model_copy(update={"moved": moved(done)})


def _hold_estimate(session: Session, ledger: _TaskLedger, ref: TaskRef) -> str | None:
    """Hold the task's estimate (or, with `hold_for_attempt`, one more for that attempt) unless held
    already; why not when the tenant's credit cannot cover it (nothing is written then)."""
    hold = Hold.TASK if ref.hold_for_attempt is None else Hold(ref.hold)
    reserve_key = hold_key(ref.task_id, ref.run, hold, attempt_no=ref.hold_for_attempt)
    if reserve_key in ledger.entries:
        return None
    available = available_credit(session, ledger.tenant_id)  # locks the tenant row: check and insert agree
    if available < ledger.estimated_cost:
        return f"tenant {ledger.tenant_id} has {available} credits, task needs {ledger.estimated_cost}"
    ledger.append(session, [_Entry("RESERVE", ledger.estimated_cost, reserve_key, ref.hold_for_attempt)])
    return None


def _closing(req: SettleInput, ledger: _TaskLedger) -> list[_Entry]:
    """The rows that close a task's ledger run (those it holds already are not written again)."""
    run = run_suffix(req.run)
    cost = Decimal(str(req.cost)).quantize(CENT)
    if req.after_review:
        return _closing_after_review(req, ledger, cost)
    reserved = ledger.total("RESERVE")  # the task's hold and those of its regenerations
    settled = min(cost, reserved)
    entries = []
    if settled > 0:
        entries.append(_Entry("SETTLE", settled, f"settle:{req.task_id}{run}", req.attempt_no))
    if reserved - settled > 0:
        entries.append(_Entry("RELEASE", reserved - settled, f"release:{req.task_id}{run}", req.attempt_no,
                              note=req.reason or None))
    if cost > reserved:
        entries.append(_Entry("ADJUSTMENT", cost - reserved, f"adjustment:{req.task_id}:{req.attempt_no}",
                              req.attempt_no, note="provider cost above reservation"))
    return entries


def _closing_after_review(req: SettleInput, ledger: _TaskLedger, cost: Decimal) -> list[_Entry]:
    """Review closed the reservation: a regenerated attempt's cost is an ADJUSTMENT of its own, and what
    the run held since (a dearer route's top-up, an accepted duplicate risk's estimate) is released, so
    no hold outlives the task."""
    still_held = ledger.total("RESERVE") - ledger.total("SETTLE") - ledger.total("RELEASE")
    entries = []
    if cost > 0:
        entries.append(_Entry("ADJUSTMENT", cost, later_close_key("ADJUSTMENT", req.task_id, req.run, req.attempt_no),
                              req.attempt_no, note="attempt regenerated at review"))
    if still_held > 0:
        entries.append(_Entry("RELEASE", still_held, later_close_key("RELEASE", req.task_id, req.run, req.attempt_no),
                              req.attempt_no, note="held after review closed the reservation"))
    return entries


def _unverifiable_risks(session: Session, req: SettleInput, ledger: _TaskLedger,
                        unlisted: frozenset[str]) -> list[_Entry]:
    """The accepted duplicate risks nobody can ever settle: an unknown submit given up (ABANDONED, no
    job id) whose estimate was held (`reserve:{task}:a{attempt}`, duplicate-risk-held-v1), at a
    provider the backstop cannot list. The job that submit may have made is charged at that estimate,
    an ADJUSTMENT naming the attempt, rather than released with the task: the ledger accounts for
    every job the provider may bill."""
    holds = {n: amount for key, (_, amount) in ledger.entries.items()
             if (n := held_attempt(key, req.task_id, req.run, Hold.RISK)) is not None}
    if not holds or not unlisted:
        return []
    abandoned = session.execute(select(Attempt.attempt_no, Attempt.provider).where(
        Attempt.task_id == req.task_id, Attempt.attempt_no.in_(list(holds)), Attempt.provider_job_id.is_(None),
        Attempt.submit_state == AttemptState.ABANDONED.value, Attempt.provider.in_(unlisted))
        .order_by(Attempt.attempt_no)).all()
    return [_Entry("ADJUSTMENT", holds[n], f"adjustment:{req.task_id}{run_suffix(req.run)}:risk:a{n}", n,
                   note=f"the job attempt {n}'s unknown submit may have made (duplicate risk accepted): {provider} "
                        f"cannot list its jobs, so its cost is charged at the estimate held for it")
            for n, provider in abandoned]


@dataclass(frozen=True)
class _Entry:
    entry_type: str
    amount: Decimal
    key: str
    attempt_no: int | None = None
    note: str | None = None


_TASK_LEDGER = text("""
SELECT t.tenant_id, t.estimated_cost, c.business_key, c.entry_type, c.amount
  FROM tasks t LEFT JOIN credit_ledger c ON c.task_id = t.id AND c.run_no = :run
 WHERE t.id = :task_id
""")
# Credits not available to new work: held reservations plus spending. Read after the tenant row is
# locked (FOR UPDATE, a statement of its own), so reservations of one tenant are checked one at a time.
_AVAILABLE = text("""
SELECT t.credit_limit - coalesce((
         SELECT sum(CASE c.entry_type WHEN 'RESERVE' THEN c.amount WHEN 'RELEASE' THEN -c.amount
                                      WHEN 'ADJUSTMENT' THEN c.amount WHEN 'REFUND' THEN -c.amount ELSE 0 END)
           FROM credit_ledger c WHERE c.tenant_id = t.id), 0)
  FROM tenants t WHERE t.id = :tenant_id""")
_LOCK_TENANT = text("SELECT 1 FROM tenants WHERE id = :tenant_id FOR UPDATE")


@dataclass
class _TaskLedger:
    """One run of a task's ledger rows, read in one query with the task's tenant and estimate, so a
    ledger step costs a read, at most one insert, and no re-read of what it just wrote."""

    task_id: str
    run: int
    tenant_id: str
    estimated_cost: Decimal
    entries: dict[str, tuple[str, Decimal]] = field(default_factory=dict)  # business key -> (type, amount)

    @classmethod
    def read(cls, session: Session, task_id: str, run: int) -> _TaskLedger:
        rows = session.execute(_TASK_LEDGER, {"task_id": task_id, "run": run}).all()
        if not rows:
            raise TaskNotFound(task_id)
        ledger = cls(task_id, run, rows[0].tenant_id, rows[0].estimated_cost)
        ledger.entries = {r.business_key: (r.entry_type, r.amount) for r in rows if r.business_key is not None}
        return ledger

    def total(self, entry_type: str) -> Decimal:
        return sum((amount for kind, amount in self.entries.values() if kind == entry_type), Decimal(0))

    def append(self, session: Session, entries: list[_Entry]) -> None:
        """Insert the entries this ledger does not hold yet, in one statement (once per business key)."""
        new = [e for e in entries if e.key not in self.entries]
        if not new:
            return
        inserted = set(session.scalars(
            insert(CreditEntry)
            .values([{"tenant_id": self.tenant_id, "task_id": self.task_id, "entry_type": e.entry_type,
                      "amount": e.amount, "business_key": e.key, "attempt_no": e.attempt_no, "note": e.note,
                      "run_no": self.run} for e in new])
            .on_conflict_do_nothing(index_elements=["business_key"])
            .returning(CreditEntry.business_key)
        ).all())
        self.entries.update({e.key: (e.entry_type, e.amount) for e in new if e.key in inserted})
        spent = sum((e.amount for e in new if e.key in inserted and e.entry_type in SPENDING), Decimal(0))
        if spent:
            CREDIT_SPENT.labels(self.tenant_id).inc(float(spent))
        if len(inserted) < len(new):  # a concurrent run of this step wrote some: read what is stored
            self.entries = _TaskLedger.read(session, self.task_id, self.run).entries

    def balance(self) -> LedgerResult:
        sums: dict[str, Decimal] = {}
        for entry_type, amount in self.entries.values():
            sums[entry_type] = sums.get(entry_type, Decimal(0)) + amount
        return LedgerResult(
            reserved=float(sums.get("RESERVE", 0)), settled=float(sums.get("SETTLE", 0)),
            released=float(sums.get("RELEASE", 0)), adjusted=float(sums.get("ADJUSTMENT", 0)),
        )


def available_credit(session: Session, tenant_id: str, *, lock: bool = True) -> Decimal:
    """The tenant's credit left for new work; `lock` holds the tenant row to the end of the
    transaction, so that a check and the RESERVE it allows are not interleaved with another's."""
    if lock:
        # Its own statement: under READ COMMITTED a statement that waited for the lock still reads the
        # ledger as it was when the statement began, without the RESERVE of the transaction it waited
        # for; the sum below, a new statement, sees it (four 2-credit holds passed on 5 credits).
        session.execute(_LOCK_TENANT, {"tenant_id": tenant_id})
    return session.scalar(_AVAILABLE, {"tenant_id": tenant_id})


def held_for_video(session: Session, task_id: str, run: int) -> Decimal:
    """What the run holds for its video: its reservation and the top-ups of the routes it took (not the
    further holds of regenerations or accepted risks, which are for other jobs)."""
    base, routes = hold_key(task_id, run), route_holds_prefix(task_id, run)
    return sum((amount for key, (kind, amount) in _TaskLedger.read(session, task_id, run).entries.items()
                if kind == "RESERVE" and (key == base or key.startswith(routes))), Decimal(0))


def reserve_route_difference(session: Session, task_id: str, run: int, attempt_no: int, extra: Decimal,
                             note: str) -> None:
    """Hold `extra` more for the dearer route `attempt_no` takes, under the next route step of the run
    (each route change that costs more holds its own difference, however many come before one attempt).
    The caller checked the tenant's credit with the tenant row locked (`available_credit`) and holds the
    task's row (FOR UPDATE), so the steps are numbered one at a time."""
    ledger = _TaskLedger.read(session, task_id, run)
    routes = route_holds_prefix(task_id, run)
    step = 1 + sum(1 for key in ledger.entries if key.startswith(routes))
    key = hold_key(task_id, run, Hold.ROUTE, step=step)
    ledger.append(session, [_Entry("RESERVE", extra.quantize(CENT), key, attempt_no, note=note)])
