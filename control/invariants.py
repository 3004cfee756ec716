"""The one invariant checker: `reelqueue ledger check`, the crash drills and the chaos run all call
`check_invariants`. Postgres rules come from schema/invariants.py and schema/ledger_check.py (through
control/ledger_audit.py, which also asks Temporal about open reservations); here are the parts that
need S3 (asset bytes, orphan objects), Temporal (gate slots) or the provider (its job counts).

A rule whose input is missing is reported `checked: false`, never as passed: the provider's job
counts (`provider_jobs`, which production does not have), a gate that did not answer or that
Temporal does not know on the queue asked though tasks of the scope took its slots, or the object
rules when `storage` is off.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import httpx
from minio.error import S3Error
from pydantic import BaseModel
from sqlalchemy import select
from temporalio.client import Client, WorkflowQueryFailedError, WorkflowQueryRejectedError
from temporalio.common import QueryRejectCondition
from temporalio.service import RPCError, RPCStatusCode

from adapters.storage import ListedObject, ObjectStorage
from adapters.temporal_client import connect
from config.defaults import AdmissionLayers
from config.settings import Settings
from contracts import workflow_api as api
from control.ledger_audit import audit_ledger
from control.storage_gc import STAGING_PART, pages, referenced_keys, task_of
from schema import invariants as inv
from schema.db import Database
from schema.invariants import AssetRow, Invariant, InvariantReport, RuleResult
from schema.ledger_check import LEDGER_FINAL
from schema.models import Task

# An object written a moment before its row (a put, then the asset's insert) is not an orphan yet:
# only one older than this is. A run that has ended (no writer left) may pass 0.
ORPHAN_SAFETY_S = 600.0
HASH_WORKERS = 8  # objects hashed at once (each one streamed, never held whole)
LIST_WORKERS = 8  # task prefixes listed at once
GATE_QUERY_S = 5.0
SHOWN_GATES = 20  # gates named in the slot rule's detail (all are asked)

__all__ = ["ORPHAN_SAFETY_S", "GateAnswer", "InvariantReport", "RuleResult", "check_invariants",
           "emulator_jobs_by_task"]


async def check_invariants(
    settings: Settings,
    *,
    import_id: str | None = None,
    provider_jobs: Mapping[str, int] | None = None,
    orphan_safety_s: float = ORPHAN_SAFETY_S,
    require_finished: bool = True,
    storage: bool = True,
) -> InvariantReport:
    """Every invariant over the tasks of `import_id` (all tasks if None).

    `provider_jobs`: jobs the provider holds per task id (the emulator's `emulator_jobs_by_task`);
    None leaves that rule unchecked. `require_finished` False judges a live system: tasks under way
    are no violation of `task_finished`. `storage` False skips the two object rules (a whole
    production bucket is hours of hashing)."""
    ledger = await audit_ledger(settings, import_id)
    db = Database(settings.database_url)
    pg = await asyncio.to_thread(_postgres_rules, db, import_id, provider_jobs, require_finished, storage,
                                 settings.admission_layers())
    rules = [pg.finished]
    rules.append(inv.provider_jobs_rule(pg.jobs, provider_jobs) if pg.jobs is not None and provider_jobs is not None
                 else RuleResult.not_checked(Invariant.PROVIDER_JOBS, "no job counts from the provider"))
    slow = [gate_slots(settings, db, import_id, pg.takers)]  # S3 and Temporal at once
    if storage:
        store = ObjectStorage.from_settings(settings)
        slow.append(asyncio.to_thread(asset_hashes, store, pg.assets))
        slow.append(asyncio.to_thread(orphan_objects, db, store, pg.prefixes, orphan_safety_s,
                                      settings.gc_staging_min_age_s))
    else:
        rules += [RuleResult.not_checked(r, "object storage not read")
                  for r in (Invariant.ASSET_SHA256, Invariant.ORPHAN_OBJECTS)]
    rules += await asyncio.gather(*slow)
    rules += inv.ledger_results(ledger.violations, pg.totals)
    rules.append(pg.events)
    order = list(Invariant)
    rules.sort(key=lambda r: order.index(Invariant(r.rule)))
    report = InvariantReport.of(import_id, pg.tasks, rules)
    report.ledger_violations = ledger.violations
    report.workflows_described = ledger.workflows_described
    report.orphans = ledger.orphans
    return report


class _Postgres(BaseModel):
    tasks: int
    finished: RuleResult
    events: RuleResult
    totals: inv.LedgerTotals
    jobs: dict[str, inv.JobsExpected] | None
    assets: list[AssetRow]
    prefixes: list[str] | None  # task prefixes to list; None: the whole `tenants/` tree
    takers: dict[str, int]  # gate name -> tasks of the scope that took its slots


def _postgres_rules(db: Database, import_id: str | None, provider_jobs: Mapping[str, int] | None,
                    require_finished: bool, storage: bool, layers: AdmissionLayers) -> _Postgres:
    with db.transaction() as session:
        prefixes = None
        if storage and import_id is not None:
            prefixes = [f"tenants/{t}/tasks/{i}/" for i, t in session.execute(
                inv.scoped(select(Task.id, Task.tenant_id), import_id).order_by(Task.id))]
        return _Postgres(
            tasks=inv.count_tasks(session, import_id),
            finished=inv.unfinished(session, import_id, require_finished=require_finished),
            events=inv.state_events(session, import_id),
            totals=inv.ledger_totals(session, import_id),
            jobs=inv.jobs_expected(session, import_id) if provider_jobs is not None else None,
            assets=inv.asset_rows(session, import_id) if storage else [],
            prefixes=prefixes,
            takers=inv.slot_takers(session, import_id, layers),
        )


# -- the provider -----------------------------------------------------------------------------------


def emulator_jobs_by_task(settings: Settings) -> dict[str, int]:
    """task id -> jobs the emulator ever created for it (request keys are `{task}-a{n}`)."""
    response = httpx.get(f"{settings.emulator_url.rstrip('/')}/_sim/jobs", timeout=30)
    response.raise_for_status()
    return jobs_by_task(str(j.get("request_key") or "") for j in response.json()["jobs"])


def jobs_by_task(request_keys: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for key in request_keys:
        task_id, sep, _ = key.rpartition("-a")
        if sep:
            counts[task_id] = counts.get(task_id, 0) + 1
    return counts


# -- object storage ---------------------------------------------------------------------------------


def asset_hashes(storage: ObjectStorage, assets: list[AssetRow]) -> RuleResult:
    """Each asset's object, streamed and hashed (HASH_WORKERS at once): its sha256 and size are the row's."""
    def verdict(row: AssetRow) -> str | None:
        digest, size = hashlib.sha256(), 0
        try:
            for chunk in storage.iter_object(row.key):
                digest.update(chunk)
                size += len(chunk)
        except S3Error as exc:
            return f"{row.key}: {exc.code}"
        if digest.hexdigest() != row.sha256 or size != row.size:
            return f"{row.key}: sha256 {digest.hexdigest()[:12]}…, {size} bytes; the row says {row.sha256[:12]}…, " \
                   f"{row.size} bytes"
        return None

    with ThreadPoolExecutor(HASH_WORKERS) as pool:
        verdicts = list(pool.map(verdict, assets))
    bad = [(row, why) for row, why in zip(assets, verdicts, strict=True) if why]
    detail = f"{len(assets)} objects hashed" + (f"; first: {bad[0][1]}" if bad else "")
    return RuleResult.found(Invariant.ASSET_SHA256, [row.task_id for row, _ in bad], detail, violations=len(bad))


def orphan_objects(db: Database, storage: ObjectStorage, prefixes: list[str] | None, safety_s: float,
                   staging_window_s: float, now: datetime | None = None) -> RuleResult:
    """Objects under task prefixes that no row names, older than `safety_s`. Staging objects left by
    an interrupted fetch are `reelqueue gc`'s to remove: only one older than its window is counted."""
    now = now or datetime.now(UTC)
    scanned = young = staging = 0
    orphans: list[ListedObject] = []
    for page in pages(_listed(storage, prefixes)):
        named = referenced_keys(db, [o.key for o in page])
        for obj in page:
            scanned += 1
            if obj.key in named:
                continue
            age = (now - obj.last_modified) if obj.last_modified else timedelta.max
            window = max(safety_s, staging_window_s) if STAGING_PART in obj.key else safety_s
            if age.total_seconds() < window:
                staging += STAGING_PART in obj.key
                young += STAGING_PART not in obj.key
                continue
            orphans.append(obj)
    detail = (f"{scanned} objects listed; {young} without a row inside the {safety_s:g} s window, {staging} staging "
              "objects for gc" + (f"; first: {orphans[0].key}" if orphans else ""))
    return RuleResult.found(Invariant.ORPHAN_OBJECTS, [task_of(o.key) or o.key for o in orphans], detail,
                            violations=len(orphans))


def _listed(storage: ObjectStorage, prefixes: list[str] | None) -> Iterator[ListedObject]:
    if prefixes is None:
        yield from (o for o in storage.list_objects("tenants/") if task_of(o.key))
        return
    with ThreadPoolExecutor(LIST_WORKERS) as pool:
        for objects in pool.map(lambda p: list(storage.list_objects(p)), prefixes):
            yield from objects


# -- gate slots -------------------------------------------------------------------------------------


class GateAnswer(BaseModel):
    """What one gate said when asked for its holders."""

    gate_id: str
    holders: list[str] | None = None  # None: no list came (closed, not found, or no answer)
    closed: bool = False  # it ran and ended: it holds nothing
    not_found: bool = False  # Temporal never ran it on this queue (or no longer keeps it)
    error: str | None = None  # it did not answer
    takers: int = 0  # the scope's tasks that held one of its slots (it must have run for them)

    @property
    def decided(self) -> bool:
        """Its answer settles whether it holds a finished task's slot."""
        return self.error is None and not (self.not_found and self.takers)

    def said(self) -> str:
        if self.holders is not None:
            return f"{self.gate_id}: {len(self.holders)} slots held"
        if self.closed:
            return f"{self.gate_id}: closed"
        if self.not_found:
            return f"{self.gate_id}: not found" + (f", though {self.takers} tasks of the scope took its slots"
                                                   if self.takers else " (no task of the scope took its slot)")
        return f"{self.gate_id}: no answer ({self.error})"


async def gate_slots(settings: Settings, db: Database, import_id: str | None, takers: Mapping[str, int]) -> RuleResult:
    """Ask every gate of the scope (provider, tenant, model, platform) (`takers`: gate name -> tasks of the scope
    that took its slots) on `settings.task_queue` who holds a slot; a finished task must not. The
    detail names each gate and its answer. A gate that does not answer, or that Temporal does not
    know though tasks of the scope took its slots (they ran on another queue, or it is gone), leaves
    the rule not checked: it looked at nothing."""
    asked = {api.gate_id(name, settings.task_queue): n for name, n in sorted(takers.items())}
    if not asked:
        return RuleResult.found(Invariant.GATE_SLOTS, [], "no gate to ask")
    try:
        client = await asyncio.wait_for(connect(settings), GATE_QUERY_S)
    except (TimeoutError, RuntimeError) as exc:
        return RuleResult.not_checked(Invariant.GATE_SLOTS, f"Temporal not reachable: {exc or 'no answer'}")
    answers = await asyncio.gather(*(_holders(client, g, n) for g, n in asked.items()))
    said = "; ".join(a.said() for a in answers[:SHOWN_GATES])
    said += f"; and {len(answers) - SHOWN_GATES} more" if len(answers) > SHOWN_GATES else ""
    undecided = [a for a in answers if not a.decided]
    if undecided:
        return RuleResult.not_checked(Invariant.GATE_SLOTS, f"{undecided[0].said()}; {len(asked)} gates asked: {said}")
    holders = sorted({h for a in answers for h in a.holders or []})
    finished = await asyncio.to_thread(_finished_holders, db, import_id, holders)
    detail = f"{len(asked)} gates asked: {said}; {len(holders)} slots held, {len(finished)} by finished tasks"
    return RuleResult.found(Invariant.GATE_SLOTS, finished, detail)


async def _holders(client: Client, gate_id: str, takers: int) -> GateAnswer:
    """The gate's holders, or what it said instead."""
    answer = GateAnswer(gate_id=gate_id, takers=takers)
    try:
        answer.holders = await client.get_workflow_handle(gate_id).query(
            api.QUERY_GATE_HOLDERS, result_type=list[str], rpc_timeout=timedelta(seconds=GATE_QUERY_S),
            reject_condition=QueryRejectCondition.NOT_OPEN)
    except WorkflowQueryRejectedError:
        answer.closed = True
    except WorkflowQueryFailedError as exc:  # a gate from before the holders query
        answer.error = str(exc)
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            answer.not_found = True
        else:
            answer.error = f"{exc.status.name} (no worker on its task queue?)"
    return answer


def _finished_holders(db: Database, import_id: str | None, holders: list[str]) -> list[str]:
    if not holders:
        return []
    with db.transaction() as session:
        stmt = inv.scoped(select(Task.id).where(Task.workflow_id.in_(holders), Task.status.in_(LEDGER_FINAL)),
                          import_id)
        return list(session.scalars(stmt.order_by(Task.id)))
