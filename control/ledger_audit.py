"""`reelqueue ledger check`: the Postgres rules (schema/ledger_check.py) plus the one rule only
Temporal can decide, that an open reservation belongs to a workflow that is still running.

Temporal is asked only about tasks that hold a reservation and are neither finished nor waiting for
a person, so a finished import costs no Temporal call at all.
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from adapters.temporal_client import connect
from config.settings import Settings
from schema import ledger_check
from schema.db import Database
from schema.ledger_check import OpenHold, OrphanJob, Rule, Violation

DESCRIBE_CONCURRENCY = 16
NOT_FOUND = "NOT_FOUND"


class LedgerReport(BaseModel):
    import_id: str | None
    tasks_checked: int
    workflows_described: int
    violations: list[Violation]
    ok: bool
    orphans: list[OrphanJob] = []  # jobs the provider backstop found (schema/ledger_check.py)


async def audit_ledger(settings: Settings, import_id: str | None = None) -> LedgerReport:
    db = Database(settings.database_url)
    with db.transaction() as session:
        findings = ledger_check.check(session, import_id)
    violations = list(findings.violations)
    if findings.open_holds:
        client = await connect(settings)
        states = await _workflow_states(client, findings.open_holds)
        closed = {h.task_id: states[h.task_id] for h in findings.open_holds if states[h.task_id] != "RUNNING"}
        with db.transaction() as session:  # re-read: a workflow that closed meanwhile closed its ledger first
            still_open = ledger_check.open_holds(session, list(closed))
        violations += [_orphan(hold, closed[hold.task_id]) for hold in still_open]
    violations.sort(key=lambda v: (v.task_id, v.rule))
    return LedgerReport(import_id=import_id, tasks_checked=findings.tasks_checked,
                        workflows_described=len(findings.open_holds), violations=violations, ok=not violations,
                        orphans=findings.orphans)


async def _workflow_states(client: Client, holds: list[OpenHold]) -> dict[str, str]:
    """task id -> its workflow's status name (RUNNING, COMPLETED, TERMINATED, ...) or NOT_FOUND."""
    gate = asyncio.Semaphore(DESCRIBE_CONCURRENCY)

    async def state(hold: OpenHold) -> tuple[str, str]:
        async with gate:
            try:
                desc = await client.get_workflow_handle(hold.workflow_id).describe()
            except RPCError as exc:
                if exc.status != RPCStatusCode.NOT_FOUND:
                    raise
                return hold.task_id, NOT_FOUND
        return hold.task_id, desc.status.name if desc.status else "UNKNOWN"

    return dict(await asyncio.gather(*(state(h) for h in holds)))


def _orphan(hold: OpenHold, workflow_state: str) -> Violation:
    why = "no such workflow" if workflow_state == NOT_FOUND else f"workflow is {workflow_state}"
    return Violation(task_id=hold.task_id, status=hold.status, rule=Rule.RESERVATION_WITHOUT_WORKFLOW,
                     detail=f"reservation open ({ledger_check.fmt_amount(hold.held)} held) without a running "
                            f"workflow: {hold.workflow_id}: {why}")
