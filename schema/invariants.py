"""The invariants a run must hold, as far as Postgres alone decides them: one implementation per rule,
shared by `reelqueue ledger check`, the crash drills and the chaos run (control/invariants.py adds
what S3, Temporal and the provider know). The rules and what each proves are in docs/reliability.md
("Invariants").

The ledger's own rules stay in schema/ledger_check.py; `ledger_results` turns their findings into
rule results. Each rule here reads only the rows that break it (or one aggregate), except the state
event rule, which streams the scope's applied events once and judges them with the state machine
(schema/state_machine.py is the only judge of a transition).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from decimal import Decimal
from enum import StrEnum

from pydantic import BaseModel
from sqlalchemy import Select, and_, exists, func, or_, select
from sqlalchemy.orm import Session

from config.defaults import AdmissionLayers
from contracts.task import TaskEvent, TaskStatus
from contracts.workflow_api import PLATFORM_GATE, model_gate, tenant_gate
from schema import ledger_check
from schema import state_machine as sm
from schema.import_scope import in_import
from schema.ledger_check import LEDGER_FINAL, OrphanJob, Rule, Violation, fmt_amount
from schema.models import Asset, Attempt, CreditEntry, StateEvent, StrayJob, Task, Tenant

SHOWN_IDS = 50  # task ids listed per rule (the count is always complete)
ATTENTION = TaskStatus.NEEDS_ATTENTION.value
# Attempts whose job may exist without the row knowing its id: the submit's outcome was never learned
# (SENDING, UNKNOWN) or a person accepted not learning it (ABANDONED).
JOB_UNKNOWN_STATES = frozenset(s.value for s in (*sm.ATTEMPT_UNRESOLVED, sm.AttemptState.ABANDONED))
# The API's create writes this audit event (CREATED -> CREATED, version 0) as a task's first.
CREATED_AUDIT = (TaskEvent.CREATED.value, TaskStatus.CREATED.value, TaskStatus.CREATED.value, 0)


class Invariant(StrEnum):
    TASK_FINISHED = "task_finished"  # terminal (or INVALID), or NEEDS_ATTENTION with its evidence
    PROVIDER_JOBS = "provider_jobs"  # the provider's jobs per task = attempts with a job + recorded strays
    STRAY_UNACCOUNTED = Rule.STRAY_UNACCOUNTED.value  # every extra job costed (ADJUSTMENT)
    ASSET_SHA256 = "asset_sha256"  # each asset row's sha256 and size are its stored object's
    ORPHAN_OBJECTS = "orphan_objects"  # no object under a task's prefix without a row, past the window
    LEDGER_BALANCED = "ledger_balanced"  # RESERVE = SETTLE + RELEASE per task run and over the scope
    REPEATED_ENTRY = Rule.REPEATED_ENTRY.value
    OPEN_ATTEMPT = Rule.OPEN_ATTEMPT.value
    ATTEMPT_SENDING = Rule.ATTEMPT_SENDING.value
    RESERVATION_WITHOUT_WORKFLOW = Rule.RESERVATION_WITHOUT_WORKFLOW.value
    HELD_PAST_DEADLINE = Rule.HELD_PAST_DEADLINE.value
    ORPHAN_UNACCOUNTED = Rule.ORPHAN_UNACCOUNTED.value
    TOTALS_DRIFT = Rule.TOTALS_DRIFT.value  # each task run's running totals = the sums of its ledger rows
    IMPORT_TOTALS_DRIFT = Rule.IMPORT_TOTALS_DRIFT.value  # each import's running totals = a recount
    STATE_EVENTS = "state_events"  # versions strictly increase, every move is a row of the table
    GATE_SLOTS = "gate_slots"  # no slot of any layer's gate (provider, tenant, model, platform) held by a finished task


# The rules schema/ledger_check.py decides (`ledger_results`): their rows are `ledger_violations`.
LEDGER_RULES: frozenset[str] = frozenset({Invariant.LEDGER_BALANCED.value} | {r.value for r in Rule})


class RuleResult(BaseModel):
    rule: str
    checked: bool  # False: this run could not decide it (its input was not given or did not answer)
    violations: int
    task_ids: list[str]  # the first SHOWN_IDS tasks that break it
    detail: str

    @classmethod
    def found(cls, rule: Invariant, task_ids: Iterable[str], detail: str, violations: int | None = None) -> RuleResult:
        """A checked rule; `violations` defaults to the number of distinct tasks."""
        ids = list(dict.fromkeys(task_ids))
        return cls(rule=rule.value, checked=True, violations=len(ids) if violations is None else violations,
                   task_ids=ids[:SHOWN_IDS], detail=detail)

    @classmethod
    def not_checked(cls, rule: Invariant, why: str) -> RuleResult:
        return cls(rule=rule.value, checked=False, violations=0, task_ids=[], detail=f"not checked: {why}")


class InvariantReport(BaseModel):
    import_id: str | None
    tasks: int
    rules: list[RuleResult]
    ok: bool  # every checked rule has no violation
    ledger_violations: list[Violation] = []  # schema/ledger_check.py's rows (`ledger check` prints them)
    workflows_described: int = 0  # Temporal asked about open reservations
    orphans: list[OrphanJob] = []  # jobs the provider backstop found (`ledger check` lists them)

    @classmethod
    def of(cls, import_id: str | None, tasks: int, rules: list[RuleResult]) -> InvariantReport:
        return cls(import_id=import_id, tasks=tasks, rules=rules,
                   ok=all(r.violations == 0 for r in rules if r.checked))

    def rule(self, name: str) -> RuleResult:
        return next(r for r in self.rules if r.rule == name)

    def violated(self) -> dict[str, int]:
        """rule -> violations, for the rules that have any."""
        return {r.rule: r.violations for r in self.rules if r.violations}


def scoped(stmt: Select, import_id: str | None) -> Select:
    return stmt if import_id is None else stmt.where(in_import(import_id))


def count_tasks(session: Session, import_id: str | None) -> int:
    return session.scalar(scoped(select(func.count()).select_from(Task), import_id)) or 0


# -- every task finished -------------------------------------------------------------------------


def unfinished(session: Session, import_id: str | None, *, require_finished: bool = True) -> RuleResult:
    """Tasks neither ended (terminal or INVALID) nor waiting for a person with the evidence a person
    needs (the latest needs_attention event's `evidence`). With `require_finished` False (a live
    system) tasks under way are counted in the detail, not as violations."""
    evidence = exists().where(
        StateEvent.task_id == Task.id, StateEvent.applied, StateEvent.event == TaskEvent.NEEDS_ATTENTION.value,
        func.coalesce(StateEvent.payload["evidence"].astext, "") != "")
    bare_attention = and_(Task.status == ATTENTION, ~evidence)
    under_way = and_(Task.status.not_in(LEDGER_FINAL), Task.status != ATTENTION)
    rows = session.execute(scoped(select(Task.id, Task.status), import_id)
                           .where(or_(bare_attention, under_way)).order_by(Task.id)).all()
    bare = [t for t, s in rows if s == ATTENTION]
    going: dict[str, list[str]] = defaultdict(list)
    for task_id, status in rows:
        if status != ATTENTION:
            going[status].append(task_id)
    statuses = ", ".join(f"{s} {len(ids)}" for s, ids in sorted(going.items())) or "none"
    detail = f"{len(bare)} NEEDS_ATTENTION without evidence; under way: {statuses}"
    if not require_finished:
        return RuleResult.found(Invariant.TASK_FINISHED, bare, detail + " (not judged on a live system)")
    return RuleResult.found(Invariant.TASK_FINISHED, [*bare, *(t for ids in going.values() for t in ids)], detail)


# -- provider jobs --------------------------------------------------------------------------------


class JobsExpected(BaseModel):
    """What our rows say about one task's provider jobs."""

    known: int  # attempts with a job id + recorded stray jobs
    unknown: int = 0  # attempts whose job may exist unseen (JOB_UNKNOWN_STATES, no job id)


def jobs_expected(session: Session, import_id: str | None) -> dict[str, JobsExpected]:
    """task id -> its jobs as our rows know them, for every task of the scope."""
    with_job = func.count(Attempt.provider_job_id.distinct())
    unknown = func.count().filter(Attempt.provider_job_id.is_(None), Attempt.submit_state.in_(JOB_UNKNOWN_STATES))
    attempts = {t: (k, u) for t, k, u in session.execute(
        scoped(select(Task.id, with_job, unknown).select_from(Task).join(Attempt, Attempt.task_id == Task.id),
               import_id).group_by(Task.id))}
    strays = {t: n for t, n in session.execute(
        scoped(select(Task.id, func.count()).select_from(Task).join(StrayJob, StrayJob.task_id == Task.id),
               import_id).group_by(Task.id))}
    out = {}
    for task_id in session.scalars(scoped(select(Task.id), import_id)):
        known, unknown_n = attempts.get(task_id, (0, 0))
        out[task_id] = JobsExpected(known=known + strays.get(task_id, 0), unknown=unknown_n)
    return out


def provider_jobs_rule(expected: Mapping[str, JobsExpected], at_provider: Mapping[str, int]) -> RuleResult:
    """Every job the provider holds for a task is one our rows know (an attempt's or a recorded stray),
    and every job they know exists; a submit whose outcome was never learned may or may not have one."""
    bad: list[str] = []
    extra = missing = 0
    for task_id, exp in sorted(expected.items()):
        held = at_provider.get(task_id, 0)
        if held > exp.known + exp.unknown:
            extra += held - exp.known - exp.unknown
            bad.append(task_id)
        elif held < exp.known:
            missing += exp.known - held
            bad.append(task_id)
    jobs = sum(at_provider.get(t, 0) for t in expected)
    return RuleResult.found(Invariant.PROVIDER_JOBS, bad, f"{jobs} jobs at the provider for {len(expected)} tasks; "
                                                          f"{extra} not recorded, {missing} recorded but absent")


# -- the ledger -----------------------------------------------------------------------------------


class LedgerTotals(BaseModel):
    """The business entries of every ended task run in the scope, summed."""

    reserved: Decimal
    settled: Decimal
    released: Decimal

    @property
    def balanced(self) -> bool:
        return self.reserved == self.settled + self.released


def ledger_totals(session: Session, import_id: str | None) -> LedgerTotals:
    """One aggregate over the ended runs (task ended, or a run before its current one): the scope's
    own balance, summed independently of the per-task rule."""
    ended = or_(Task.status.in_(LEDGER_FINAL), CreditEntry.run_no < Task.run_no)
    sums = [func.coalesce(func.sum(CreditEntry.amount).filter(CreditEntry.entry_type == k), 0)
            for k in ledger_check.BUSINESS_ENTRIES]
    row = session.execute(scoped(select(*sums).select_from(Task).join(CreditEntry, CreditEntry.task_id == Task.id),
                                 import_id).where(ended)).one()
    return LedgerTotals(reserved=row[0], settled=row[1], released=row[2])


def ledger_results(violations: Sequence[Violation], totals: LedgerTotals) -> list[RuleResult]:
    """schema/ledger_check.py's findings as one result per rule; unbalanced task runs and the scope's
    totals make the one `ledger_balanced` rule."""
    by_rule: dict[str, list[Violation]] = defaultdict(list)
    for v in violations:
        by_rule[v.rule.value].append(v)
    out = []
    for rule in Invariant:
        if rule is Invariant.LEDGER_BALANCED:
            found = by_rule[Rule.UNBALANCED.value]
            total = (f"scope: RESERVE {fmt_amount(totals.reserved)} = SETTLE {fmt_amount(totals.settled)} + "
                     f"RELEASE {fmt_amount(totals.released)}" if totals.balanced else
                     f"scope unbalanced: RESERVE {fmt_amount(totals.reserved)} != SETTLE {fmt_amount(totals.settled)}"
                     f" + RELEASE {fmt_amount(totals.released)}")
            out.append(RuleResult.found(rule, [v.task_id for v in found], f"{len(found)} task runs unbalanced; {total}",
                                        violations=len(found) + (not totals.balanced)))
        elif rule.value in {r.value for r in Rule}:
            found = by_rule[rule.value]
            out.append(RuleResult.found(rule, [v.task_id for v in found], "; ".join(v.detail for v in found[:3]) or "-",
                                        violations=len(found)))
    return out


# -- state events ---------------------------------------------------------------------------------


Move = tuple[str, str, str, int]  # (event, from status, to status, task version) of an applied event


def bad_move(moves: Sequence[Move]) -> str | None:
    """What is wrong with one task's applied state events, oldest first, or None: versions must
    strictly increase, each event must start where the last one ended, and the state machine must
    allow each move given the task's past. The API's CREATED audit event may come first."""
    past = sm.Past()
    status, version = TaskStatus.CREATED, 0
    for i, move in enumerate(moves):
        if i == 0 and move == CREATED_AUDIT:
            continue
        event, from_status, to_status, ver = move
        if ver <= version:
            return f"{event} at version {ver} after version {version}"
        if from_status != status:
            return f"{event} from {from_status}, but the task was {status}"
        try:
            step = sm.apply(TaskStatus(from_status), ver - 1, TaskEvent(event), past)
        except (ValueError, sm.IllegalTransition) as exc:
            return f"{event} {from_status} -> {to_status}: {exc}"
        if step.to_status != to_status:
            return f"{event} {from_status} -> {to_status}: the table says {step.to_status}"
        past = past.after(step.event, step.from_status, step.to_status)
        status, version = step.to_status, ver
    return None


def _moves_by_task(session: Session, import_id: str | None) -> Iterator[tuple[str, list[Move]]]:
    stmt = scoped(select(StateEvent.task_id, StateEvent.event, StateEvent.from_status, StateEvent.to_status,
                         StateEvent.task_version).join(Task, Task.id == StateEvent.task_id), import_id)
    rows = session.execute(stmt.where(StateEvent.applied).order_by(StateEvent.task_id, StateEvent.id)
                           .execution_options(yield_per=5000))
    current, moves = None, []
    for task_id, *move in rows:
        if task_id != current:
            if current is not None:
                yield current, moves
            current, moves = task_id, []
        moves.append(tuple(move))
    if current is not None:
        yield current, moves


def state_events(session: Session, import_id: str | None) -> RuleResult:
    bad: list[str] = []
    first: str | None = None
    events = 0
    for task_id, moves in _moves_by_task(session, import_id):
        events += len(moves)
        why = bad_move(moves)
        if why is not None:
            bad.append(task_id)
            first = first or f"{task_id}: {why}"
    return RuleResult.found(Invariant.STATE_EVENTS, bad, f"{events} applied events read"
                                                          + (f"; first: {first}" if first else ""))


# -- gate slots -----------------------------------------------------------------------------------


def slot_takers(session: Session, import_id: str | None, layers: AdmissionLayers | None = None) -> dict[str, int]:
    """Per gate of the scope (a provider, a tenant's `tenant_gate` name, a model's `model_gate`, the
    platform's), the scope's tasks that were granted one of its slots: the gate must have run for
    them. A task that was ever dispatched held its provider's slot, its tenant's too when the tenant
    has a concurrency, its model's when `layers` gives the model a limit and the platform's when it
    has a total (today's: a limit set since then names a gate that may never have run, and the slot
    rule then says "not checked" rather than pass it). Every provider and tenant of the scope is a
    key, 0 when none of its tasks took a slot, and so is every limited model and the platform."""
    dispatched = exists().where(StateEvent.task_id == Task.id, StateEvent.applied.is_(True),
                                StateEvent.event == TaskEvent.DISPATCH_CLAIMED.value)
    took = func.count().filter(dispatched)
    rows = session.execute(scoped(select(Task.provider, Task.model, Task.tenant_id, Tenant.max_concurrent, took)
                                  .outerjoin(Tenant, Tenant.id == Task.tenant_id)
                                  .group_by(Task.provider, Task.model, Task.tenant_id, Tenant.max_concurrent),
                                  import_id)).all()
    layers = layers or AdmissionLayers()
    takers: dict[str, int] = defaultdict(int)
    for provider, model, tenant, limit, n in rows:
        takers[provider] += n
        takers[tenant_gate(tenant)] += n if limit is not None else 0
        if layers.model(provider, model) is not None:
            takers[model_gate(provider, model)] += n
        if layers.platform is not None:
            takers[PLATFORM_GATE] += n
    return dict(takers)


# -- assets ---------------------------------------------------------------------------------------


class AssetRow(BaseModel):
    task_id: str
    key: str
    sha256: str
    size: int


def asset_rows(session: Session, import_id: str | None) -> list[AssetRow]:
    """The scope's assets: every row a task owns, and the input images its tasks were made from."""
    owned = scoped(select(Asset.task_id, Asset.key, Asset.sha256, Asset.size)
                   .join(Task, Task.id == Asset.task_id), import_id)
    inputs = scoped(select(Task.id, Asset.key, Asset.sha256, Asset.size)
                    .join(Asset, Asset.id == Task.image_asset_id), import_id)
    seen: dict[str, AssetRow] = {}
    for task_id, key, sha, size in [*session.execute(owned), *session.execute(inputs)]:
        seen.setdefault(key, AssetRow(task_id=task_id, key=key, sha256=sha, size=size))
    return list(seen.values())

