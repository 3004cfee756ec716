"""The ledger's invariants, checked in Postgres: what `reelqueue ledger check` reports.

Set-based queries that return only the rows breaking a rule, so a large healthy import reads a few
aggregates and nothing else. Whether an open reservation is still covered by a running workflow is
Temporal's to say: those tasks come back as `open_holds` for control/ledger_audit.py to ask about.
The rules are listed in docs/architecture.md ("Money").
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from enum import StrEnum

from pydantic import BaseModel
from sqlalchemy import Select, and_, exists, func, or_, select, text
from sqlalchemy.orm import Session

from contracts.task import TaskStatus
from schema.import_scope import in_import
from schema.import_totals import import_ids
from schema.import_totals_drift import drift
from schema.ledger_keys import LATER_CLOSE
from schema.models import Attempt, CreditEntry, LedgerRunTotal, StrayJob, Task
from schema.state_machine import ATTEMPT_SETTLED, TERMINAL, AttemptState
from schema.strays import STRAY_ADJUSTMENT

# INVALID can be revalidated, but it holds no reservation and runs no job: for money it is an end.
LEDGER_FINAL: frozenset[str] = frozenset(s.value for s in (*TERMINAL, TaskStatus.INVALID))
# A person decides on these; their reservation is held on purpose while they wait.
HELD_ON_PURPOSE: frozenset[str] = frozenset({TaskStatus.NEEDS_ATTENTION.value})
BUSINESS_ENTRIES = ("RESERVE", "SETTLE", "RELEASE")
# No provider job runs in these, so nothing but the task deadline (`tasks.deadline_at`, recorded by
# the workflow on QUEUED) bounds the wait; past it (and this slack for the workflow's own timer and
# its ledger step) the reservation is money nobody will use.
WAITING: frozenset[str] = frozenset({TaskStatus.QUEUED.value, TaskStatus.RETRY_WAIT.value})
DEADLINE_SLACK = timedelta(minutes=15)
BACKSTOP = "backstop"  # stray_jobs.found_by of the jobs the provider backstop found
LATE_WEBHOOK = "webhook"  # stray_jobs.found_by of a success webhook that came after its task ended CANCELED
NO_TASK = "-"  # a violation's task id when the job has no task


class Rule(StrEnum):
    UNBALANCED = "unbalanced"  # finished task: RESERVE != SETTLE + RELEASE
    # more than one RESERVE (besides one per regenerated attempt, which names it), SETTLE or RELEASE row for a task
    REPEATED_ENTRY = "repeated_entry"
    OPEN_ATTEMPT = "open_attempt"  # finished task with an attempt whose job may still bill
    ATTEMPT_SENDING = "attempt_sending"  # finished task with an attempt still SENDING: a submit never concluded
    STRAY_UNACCOUNTED = "stray_unaccounted"  # duplicate provider job without accounted + ADJUSTMENT
    RESERVATION_WITHOUT_WORKFLOW = "reservation_without_workflow"  # open hold, nobody to close it
    HELD_PAST_DEADLINE = "held_past_deadline"  # open hold of a waiting task past its task deadline
    ORPHAN_UNACCOUNTED = "orphan_unaccounted"  # a job no task knows (provider backstop), cost not booked
    TOTALS_DRIFT = "totals_drift"  # a task run's running totals (ledger_run_totals) differ from its ledger rows
    # an import's running totals (import_totals, import_moves) differ from a recount of its tasks, runs and events
    IMPORT_TOTALS_DRIFT = "import_totals_drift"


class Violation(BaseModel):
    task_id: str
    status: str
    rule: Rule
    detail: str


class OpenHold(BaseModel):
    """A reservation with neither SETTLE nor RELEASE on a task that is still under way."""

    task_id: str
    status: str
    workflow_id: str
    held: Decimal


class OrphanJob(BaseModel):
    """A job the provider backstop found that no attempt follows: no task at all (`task_id` None), or
    a task's job its workflow never accounted (an output after CANCELED, an accepted duplicate risk)."""

    provider: str
    job_id: str
    request_key: str | None
    task_id: str | None
    attempt_no: int | None
    provider_status: str | None
    cost: Decimal | None
    accounted: bool
    found_at: datetime


class LedgerFindings(BaseModel):
    import_id: str | None
    tasks_checked: int
    violations: list[Violation]
    open_holds: list[OpenHold]  # to be confirmed against Temporal (a running workflow covers them)
    orphans: list[OrphanJob] = []  # found by the provider backstop (booked ones too: they are reported)


def check(session: Session, import_id: str | None = None) -> LedgerFindings:
    """Every rule that Postgres alone can decide, for the tasks of `import_id` (all tasks if None)."""
    violations, holds = _ledger_rules(session, import_id)
    violations += _open_attempts(session, import_id)
    violations += _unaccounted_strays(session, import_id)
    violations += _held_past_deadline(session, import_id)
    violations += _totals_drift(session, import_id)
    violations += [Violation(task_id=NO_TASK, status="-", rule=Rule.IMPORT_TOTALS_DRIFT,
                             detail=f"import {imp}: " + "; ".join(found))
                   for imp, found in sorted(drift(session, import_ids(session, import_id)).items())]
    orphans = backstop_orphans(session, import_id)
    violations += [
        Violation(task_id=NO_TASK, status="-", rule=Rule.ORPHAN_UNACCOUNTED,
                  detail=f"{o.provider} job {o.job_id} (request key {o.request_key or 'none'}) is "
                         f"{o.provider_status or 'unknown'}: no task knows it and its cost is not booked yet")
        for o in orphans if o.task_id is None and not o.accounted
    ]
    count = _scoped(select(func.count()).select_from(Task), import_id)
    return LedgerFindings(import_id=import_id, tasks_checked=session.scalar(count) or 0,
                          violations=sorted(violations, key=lambda v: (v.task_id, v.rule)), open_holds=holds,
                          orphans=orphans)


def backstop_orphans(session: Session, import_id: str | None = None) -> list[OrphanJob]:
    """The jobs the provider backstop recorded (and the late outputs a webhook recorded), oldest first;
    with `import_id`, those of its tasks (a job no task knows belongs to no import and is listed only
    without one)."""
    stmt = select(StrayJob).where(StrayJob.found_by.in_((BACKSTOP, LATE_WEBHOOK))).order_by(StrayJob.id)
    if import_id is not None:
        stmt = stmt.join(Task, Task.id == StrayJob.task_id).where(in_import(import_id))
    return [OrphanJob(provider=s.provider, job_id=s.provider_job_id, request_key=s.request_key, task_id=s.task_id,
                      attempt_no=s.attempt_no, provider_status=s.provider_status, cost=s.cost, accounted=s.accounted,
                      found_at=s.created_at)
            for s in session.scalars(stmt)]


def open_holds(session: Session, task_ids: Sequence[str]) -> list[OpenHold]:
    """The holds among `task_ids` right now: a re-read after Temporal said a workflow is closed,
    because a workflow that closed in between has closed its ledger first."""
    if not task_ids:
        return []
    return _ledger_rules(session, None, task_ids)[1]


def _scoped(stmt: Select, import_id: str | None) -> Select:
    if import_id is None:
        return stmt
    return stmt.where(in_import(import_id))


def _sum(kind: str):  # noqa: ANN202 - a SQL expression
    return func.coalesce(func.sum(CreditEntry.amount).filter(CreditEntry.entry_type == kind), 0)


def _count(kind: str):  # noqa: ANN202
    """Rows of one business entry; a RESERVE naming an attempt (a further hold, a route's top-up) is one of
    its own, and so is a RELEASE closing what a run held after review closed its reservation."""
    if kind == "RESERVE":
        return func.count().filter(CreditEntry.entry_type == kind, CreditEntry.attempt_no.is_(None))
    if kind == "RELEASE":
        return func.count().filter(CreditEntry.entry_type == kind, ~CreditEntry.business_key.contains(LATER_CLOSE))
    return func.count().filter(CreditEntry.entry_type == kind)


def _ledger_rules(session: Session, import_id: str | None,
                  task_ids: Sequence[str] | None = None) -> tuple[list[Violation], list[OpenHold]]:
    reserved, settled, released = (_sum(k) for k in BUSINESS_ENTRIES)
    counts = [_count(k) for k in BUSINESS_ENTRIES]
    # Each run of a task balances on its own; a run before the task's current one has ended.
    final = or_(Task.status.in_(LEDGER_FINAL), CreditEntry.run_no < Task.run_no)
    open_hold = and_(~final, Task.status.not_in(HELD_ON_PURPOSE), counts[0] > 0, counts[1] == 0, counts[2] == 0)
    stmt = (
        _scoped(select(Task.id, Task.status, Task.workflow_id, reserved, settled, released, *counts,
                       final), import_id)
        .join(CreditEntry, CreditEntry.task_id == Task.id)
        .group_by(Task.id, CreditEntry.run_no)  # per run; status and workflow_id follow from the key
        .having(or_(*(c > 1 for c in counts), and_(final, reserved != settled + released), open_hold))
        .order_by(Task.id)
    )
    if task_ids is not None:
        stmt = stmt.where(Task.id.in_(task_ids))
    violations: list[Violation] = []
    holds: list[OpenHold] = []
    for task_id, status, workflow_id, res, sett, rel, *ns, ended in session.execute(stmt):
        for kind, n in zip(BUSINESS_ENTRIES, ns, strict=True):
            if n > 1:
                violations.append(Violation(task_id=task_id, status=status, rule=Rule.REPEATED_ENTRY,
                                            detail=f"{n} {kind} rows (one business entry per task and run)"))
        if ended and res != sett + rel:
            violations.append(Violation(task_id=task_id, status=status, rule=Rule.UNBALANCED,
                                        detail=f"RESERVE {fmt_amount(res)} != SETTLE {fmt_amount(sett)} + "
                                               f"RELEASE {fmt_amount(rel)}"))
        elif not ended and status not in HELD_ON_PURPOSE and ns[0] and not ns[1] and not ns[2]:
            holds.append(OpenHold(task_id=task_id, status=status, workflow_id=workflow_id, held=res))
    return violations, holds


def _open_attempts(session: Session, import_id: str | None) -> list[Violation]:
    """Attempts not settled on a finished task; one still SENDING (its submit was never concluded,
    not even as UNKNOWN) is its own rule, the one the chaos run counts as "no attempt left SENDING"."""
    stmt = _scoped(
        select(Attempt.task_id, Task.status, Attempt.attempt_no, Attempt.submit_state, Attempt.provider_job_id)
        .select_from(Task).join(Attempt, Attempt.task_id == Task.id), import_id,
    ).where(Task.status.in_(LEDGER_FINAL), Attempt.submit_state.not_in([s.value for s in ATTEMPT_SETTLED]))
    out = []
    for task_id, status, no, state, job in session.execute(stmt.order_by(Attempt.task_id, Attempt.attempt_no)):
        rule = Rule.ATTEMPT_SENDING if state == AttemptState.SENDING.value else Rule.OPEN_ATTEMPT
        out.append(Violation(task_id=task_id, status=status, rule=rule,
                             detail=f"attempt {no} is {state} (job {job or 'unknown'}) on a {status} task: "
                                    "a provider job the ledger does not account for"))
    return out


def _unaccounted_strays(session: Session, import_id: str | None) -> list[Violation]:
    # An attempt's own job kept as a stray (an output after CANCELED) is paid through that attempt.
    adjusted = or_(
        exists().where(CreditEntry.task_id == StrayJob.task_id, CreditEntry.entry_type == "ADJUSTMENT",
                       CreditEntry.provider_job_id == StrayJob.provider_job_id),
        exists().where(Attempt.task_id == StrayJob.task_id, Attempt.provider == StrayJob.provider,
                       Attempt.provider_job_id == StrayJob.provider_job_id))
    stmt = _scoped(
        select(StrayJob.task_id, Task.status, StrayJob.provider_job_id, StrayJob.found_by, StrayJob.provider_status,
               StrayJob.accounted, adjusted.label("adjusted"))
        .select_from(Task).join(StrayJob, StrayJob.task_id == Task.id), import_id,
    ).where(Task.status.in_(LEDGER_FINAL), or_(~StrayJob.accounted, ~adjusted))
    out = []
    for task_id, status, job, found_by, provider_status, accounted, has_adjustment in session.execute(
            stmt.order_by(StrayJob.task_id, StrayJob.id)):
        missing = [m for m, ok in (("not marked accounted", accounted), ("no ADJUSTMENT row", has_adjustment))
                   if not ok]
        out.append(Violation(task_id=task_id, status=status, rule=Rule.STRAY_UNACCOUNTED,
                             detail=f"duplicate job {job} (found by {found_by}, provider status "
                                    f"{provider_status or 'unknown'}): {' and '.join(missing)}"))
    return out


def _held_past_deadline(session: Session, import_id: str | None) -> list[Violation]:
    """Waiting tasks (QUEUED, RETRY_WAIT) whose current run still holds its reservation past the
    task deadline: the workflow should have ended them EXPIRED (seen whether or not it runs)."""
    def entry(*kinds: str):  # noqa: ANN202 - a SQL expression
        return exists().where(CreditEntry.task_id == Task.id, CreditEntry.run_no == Task.run_no,
                              CreditEntry.entry_type.in_(kinds))

    stmt = _scoped(select(Task.id, Task.status, Task.deadline_at, func.now() - Task.deadline_at), import_id).where(
        Task.status.in_(WAITING), Task.deadline_at < func.now() - DEADLINE_SLACK,
        entry("RESERVE"), ~entry("SETTLE", "RELEASE"))
    return [
        Violation(task_id=task_id, status=status, rule=Rule.HELD_PAST_DEADLINE,
                  detail=f"reservation held {status} {_hours(late)} past the task deadline "
                         f"({deadline.astimezone(UTC):%Y-%m-%d %H:%M} UTC): the wait outlived the task")
        for task_id, status, deadline, late in session.execute(stmt.order_by(Task.id))
    ]


ENTRY_TOTALS = {"RESERVE": "reserved", "SETTLE": "settled", "RELEASE": "released", "REFUND": "refunded",
                "ADJUSTMENT": "adjusted"}  # entry type -> its LedgerRunTotal column
TOTALED = (*ENTRY_TOTALS.values(), "duplicate")


def _totals_drift(session: Session, import_id: str | None) -> list[Violation]:
    """Task runs whose running totals are not the sums of their ledger rows (a write that bypassed
    the insert trigger, or a ledger row changed after it was written)."""
    ledger = (_scoped(select(CreditEntry.task_id, CreditEntry.run_no,
                             *(_sum(kind).label(column) for kind, column in ENTRY_TOTALS.items()),
                             func.coalesce(func.sum(CreditEntry.amount).filter(
                                 text(STRAY_ADJUSTMENT.format(row="credit_ledger"))), 0).label("duplicate"))
                      .join(Task, Task.id == CreditEntry.task_id), import_id)
              .group_by(CreditEntry.task_id, CreditEntry.run_no).subquery())
    totals = (_scoped(select(LedgerRunTotal).join(Task, Task.id == LedgerRunTotal.task_id), import_id).subquery())
    task_id = func.coalesce(ledger.c.task_id, totals.c.task_id)
    differs = or_(*(func.coalesce(ledger.c[c], 0) != func.coalesce(totals.c[c], 0) for c in TOTALED))
    stmt = (select(task_id, func.coalesce(ledger.c.run_no, totals.c.run_no), Task.status)
            .select_from(ledger.join(totals, and_(ledger.c.task_id == totals.c.task_id,
                                                  ledger.c.run_no == totals.c.run_no), full=True))
            .join(Task, Task.id == task_id).where(differs).order_by(task_id))
    return [Violation(task_id=t, status=status, rule=Rule.TOTALS_DRIFT,
                      detail=f"run {run}: running totals differ from the ledger's rows")
            for t, run, status in session.execute(stmt)]


def _hours(late: timedelta) -> str:
    return f"{late.total_seconds() / 3600:.1f} h"


def fmt_amount(amount: Decimal | int) -> str:
    """3.000000 -> 3, 2.500000 -> 2.5: credits as people write them."""
    return f"{Decimal(amount).normalize():f}"
