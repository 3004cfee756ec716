"""`reelqueue resolve`: an operator's decision on a NEEDS_ATTENTION task, sent as the workflow's
`resolve` Update, because the workflow holds the live job and the open attempt and must carry the
decision out itself (the CLI never changes the task row).

The workflow's update validator judges whether the decision applies: the task may have moved on
since the operator looked. A refusal, or a workflow that is closed or never ran, is the caller's
bad input (ResolveRefused); an update no worker picks up in time is ResolveNotDelivered.
`send_update` is the same path for any decision update (the reviewer's `review` too).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TypeVar

from pydantic import BaseModel
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError, WorkflowUpdateStage
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from adapters.temporal_client import connect
from config.settings import Settings
from contracts import workflow_api as api
from contracts.messages import ResolveAction, ResolveRequest, ResolveResult
from schema.db import Database
from schema.models import Task

R = TypeVar("R", bound=BaseModel)

# The validator runs on a worker: without one the update would wait silently for ever.
ACCEPT_TIMEOUT = timedelta(seconds=30)


class UnknownTask(LookupError):
    pass


class ResolveRefused(Exception):
    """The decision does not apply (validator refusal, or no running workflow to take it)."""


class ResolveNotDelivered(Exception):
    """No worker accepted the update in time; Temporal may still deliver it later."""


class ResolveOutcome(BaseModel):
    task_id: str
    workflow_id: str
    action: ResolveAction
    by: str
    reason: str
    status: str  # the task's status once the workflow has carried the decision out
    message: str


async def resolve_task(settings: Settings, task_id: str, request: ResolveRequest) -> ResolveOutcome:
    """Send `request` to the task's workflow and wait until the decision has been carried out."""
    client = await connect(settings)
    workflow_id, result = await send_update(Database(settings.database_url), client, task_id, api.UPDATE_RESOLVE,
                                            request, ResolveResult)
    return ResolveOutcome(task_id=task_id, workflow_id=workflow_id, action=request.action, by=request.by,
                          reason=request.reason, status=result.status.value, message=result.message)


async def send_update(db: Database, client: Client, task_id: str, name: str, request: BaseModel,
                      result_type: type[R]) -> tuple[str, R]:
    """Send update `name` to the task's workflow; its workflow id and the result once carried out.
    Refusals (validator, no running workflow) raise ResolveRefused; no worker in time ResolveNotDelivered."""
    with db.transaction() as session:
        task = session.get(Task, task_id)
        if task is None:
            raise UnknownTask(f"no task {task_id}")
        workflow_id, status = task.workflow_id, task.status
    handle = client.get_workflow_handle(workflow_id)
    try:
        update = await asyncio.wait_for(
            handle.start_update(name, request, wait_for_stage=WorkflowUpdateStage.ACCEPTED, result_type=result_type),
            timeout=ACCEPT_TIMEOUT.total_seconds(),
        )
        result: R = await update.result()
    except WorkflowUpdateFailedError as exc:
        raise ResolveRefused(f"refused by workflow {workflow_id}: {_message(exc.cause)}") from exc
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise
        raise ResolveRefused(await _why_not_running(handle, task_id, status)) from exc
    except TimeoutError as exc:
        raise ResolveNotDelivered(
            f"workflow {workflow_id} did not take the decision within {ACCEPT_TIMEOUT.seconds} s: is a worker "
            f"running (reelqueue dev status)? Temporal may still deliver it; check `reelqueue show {task_id}`"
        ) from exc
    return workflow_id, result


async def _why_not_running(handle: WorkflowHandle, task_id: str, status: str) -> str:
    try:
        desc = await handle.describe()
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise
        return f"task {task_id} ({status}) has no workflow {handle.id}: it never ran, so nothing waits for a decision"
    closed = desc.status.name if desc.status else "closed"
    return (f"workflow {handle.id} is {closed}, not running (task {status}): a finished workflow takes no "
            "decisions")


def _message(cause: BaseException) -> str:
    return cause.message if isinstance(cause, ApplicationError) else str(cause)
