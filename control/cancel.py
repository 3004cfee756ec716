"""`reelqueue cancel`: stop a task. A running workflow is cancelled in Temporal (it finishes the
step in flight, cancels the provider job, closes the ledger and closes as Canceled); a task whose
workflow never started is ended here, since nothing was reserved or submitted for it.
"""

from __future__ import annotations

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from contracts.task import TaskEvent
from schema import task_store
from schema.db import Database

NOT_STARTED = "not_started"


async def cancel_task(client: Client, db: Database, task_id: str, workflow_id: str, reason: str, *, by: str) -> str:
    """An operator's cancel of one task (`reelqueue cancel`, alone or for each task of an import):
    its workflow is cancelled, or, when none ever ran, the task is ended here. The outcome's text."""
    outcome = await cancel_with(client, workflow_id, reason, by=by)
    return cancel_unstarted(db, task_id, reason) if outcome == NOT_STARTED else outcome


async def cancel_with(client: Client, workflow_id: str, reason: str, *, by: str) -> str:
    """The cancel itself, for the CLI and the API: the workflow finishes its step, stops the job,
    closes the ledger."""
    handle = client.get_workflow_handle(workflow_id)
    try:
        desc = await handle.describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return NOT_STARTED
        raise
    if desc.status is not None and desc.status.name != "RUNNING":
        return f"workflow already closed ({desc.status.name})"
    await handle.cancel(reason=f"{by}: {reason}")
    return "cancel requested"


def cancel_unstarted(db: Database, task_id: str, reason: str) -> str:
    """No workflow ever ran: the task moves to CANCELED here. A workflow started for it later sees
    its first transition refused and ends without doing anything."""
    with db.transaction() as session:
        out = task_store.transition(session, task_id, TaskEvent.CANCEL_REQUESTED, source="cli",
                                    source_event_id=f"{task_id}:cli-cancel", payload={"reason": reason})
    return f"{out.status}" if out.applied else f"not canceled: task is {out.status}"
