"""Steering a whole import: list the imports, pause and resume one (`reelqueue imports / pause / resume`)."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel
from sqlalchemy import Row, false, func, insert, literal, select
from sqlalchemy.dialects.postgresql import JSONB
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from contracts import workflow_api as api
from contracts.messages import PauseRequest
from control.imports import CANCEL_CONCURRENCY, for_each, open_tasks
from schema import queries
from schema.db import Database
from schema.import_scope import import_task_ids
from schema.models import CatalogImport, CreditEntry, Plan, StateEvent, Task
from schema.state_machine import TERMINAL


class ImportRow(BaseModel):
    """One line of `reelqueue imports`."""

    id: str
    catalog: str
    version: int
    plan: str
    status: str
    created_at: datetime
    tasks: int
    by_status: dict[str, int]
    credits: dict[str, float]  # ledger sums by entry type over the import's tasks
    paused_by: str | None = None


class PauseOutcome(BaseModel):
    import_id: str
    paused: bool
    by: str
    changed: bool  # False: it already was in that state (the tasks were told again)
    told: int  # running workflows signalled
    not_running: int  # tasks whose workflow has not started (they read the flag when it does) or closed


def list_imports(db: Database) -> list[ImportRow]:
    """Every import, newest first, with its tasks by status and its ledger sums."""
    with db.transaction() as session:
        rows = session.execute(select(CatalogImport, Plan.name).join(Plan, Plan.id == CatalogImport.plan_id)
                               .order_by(CatalogImport.created_at.desc())).all()
        out = []
        for imp, plan in rows:
            counts = queries.status_counts(session, imp.id)
            sums = session.execute(select(CreditEntry.entry_type, func.sum(CreditEntry.amount))
                                   .where(CreditEntry.task_id.in_(import_task_ids(imp.id)))
                                   .group_by(CreditEntry.entry_type)).all()
            out.append(ImportRow(id=imp.id, catalog=imp.catalog, version=imp.version, plan=plan, status=imp.status,
                                 created_at=imp.created_at, tasks=sum(counts.values()), by_status=counts,
                                 credits={kind: float(amount) for kind, amount in sums}, paused_by=imp.paused_by))
    return out


async def set_paused(client: Client, db: Database, import_id: str, *, paused: bool, by: str,
                     reason: str = "") -> PauseOutcome:
    """Pause (or resume) an import: the flag in Postgres for workflows not started yet, an audit state
    event per open task naming who, and the `pause` signal to every running workflow of it. A paused
    task waits before asking for a slot; a job already running finishes."""
    now = datetime.now(UTC)
    with db.transaction() as session:
        row = session.get(CatalogImport, import_id, with_for_update=True)
        changed = (row.paused_by is not None) != paused
        row.paused_by, row.paused_at = (by, now) if paused else (None, None)
        if changed:
            _record(session, import_id, paused=paused, by=by, reason=reason, at=now)
    counts = {"told": 0, "not_running": 0}
    request = PauseRequest(paused=paused, by=by)

    async def tell(task: Row) -> None:
        try:
            await client.get_workflow_handle(task.workflow_id).signal(api.SIGNAL_PAUSE, request)
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
            counts["not_running"] += 1
            return
        counts["told"] += 1

    await for_each(open_tasks(db, import_id), tell, CANCEL_CONCURRENCY)
    return PauseOutcome(import_id=import_id, paused=paused, by=by, changed=changed, **counts)


def _record(session, import_id: str, *, paused: bool, by: str, reason: str, at: datetime) -> None:  # noqa: ANN001
    """One audit state event (not a transition: applied false, status unchanged) per open task."""
    event = "IMPORT_PAUSED" if paused else "IMPORT_RESUMED"
    payload = {"by": by, "reason": reason, "import_id": import_id}
    source_id = func.concat(Task.id, f":{event.lower()}:{at.isoformat()}")
    open_tasks_ = select(Task.id, source_id, literal(event), Task.status, Task.status, Task.version, false(),
                         literal(payload, type_=JSONB), literal("cli")).where(
        Task.id.in_(import_task_ids(import_id)), Task.status.not_in([s.value for s in TERMINAL]))
    session.execute(insert(StateEvent).from_select(
        ["task_id", "source_event_id", "event", "from_status", "to_status", "task_version", "applied", "payload",
         "source"], open_tasks_))
