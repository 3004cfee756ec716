"""`reelqueue renditions TASK [--retry]`: a task's renditions, and retrying the failed ones.

A retry starts RenditionsWorkflow (workflows/renditions.py) on the workers and waits for it; the
rows say what it achieved. Only a task whose proxy is READY has renditions to retry.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel
from temporalio.client import WorkflowFailureError
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from adapters.temporal_client import connect
from config.settings import Settings
from contracts import workflow_api as api
from contracts.messages import RenditionsResult, TranscodeInput
from schema.db import Database
from schema.models import Task
from schema.renditions import task_renditions

RETRY_TIMEOUT = timedelta(minutes=30)


class UnknownTask(LookupError):
    pass


class NothingToRetry(Exception):
    """No proxy yet (the task's own workflow makes it), or another retry is running."""


class RenditionRow(BaseModel):
    profile: str
    status: str
    attempts: int
    error: str | None = None
    verdict: str | None = None


class RenditionsReport(BaseModel):
    task_id: str
    renditions: list[RenditionRow]
    retried: bool = False
    error: str | None = None  # the retry's failure, when it ended with a rendition still FAILED

    @property
    def failed(self) -> list[RenditionRow]:
        return [r for r in self.renditions if r.status == "FAILED"]


def read_renditions(settings: Settings, task_id: str) -> tuple[RenditionsReport, str | None]:
    """The task's rendition rows, and the raw asset the renditions come from (None without a proxy)."""
    with Database(settings.database_url).transaction() as session:
        if session.get(Task, task_id) is None:
            raise UnknownTask(f"no task {task_id}")
        rows = task_renditions(session, task_id)
    raw = next((r.raw_asset_id for r in rows if r.profile == "PROXY" and r.status == "READY"), None)
    report = RenditionsReport(task_id=task_id, renditions=[
        RenditionRow(profile=r.profile, status=r.status, attempts=r.attempts, error=r.error, verdict=r.verdict)
        for r in rows])
    return report, raw


async def retry_renditions(settings: Settings, task_id: str, *, task_queue: str | None = None) -> RenditionsReport:
    """Run the renditions step again for a task with a READY proxy; the rows afterwards."""
    before, raw = read_renditions(settings, task_id)
    if raw is None:
        raise NothingToRetry(f"task {task_id} has no READY proxy: its renditions cannot be made yet")
    client = await connect(settings)
    error = None
    try:
        await client.execute_workflow(
            api.RENDITIONS_WORKFLOW_NAME, TranscodeInput(task_id=task_id, raw_asset_id=raw),
            id=api.renditions_id(task_id), task_queue=task_queue or settings.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL, result_type=RenditionsResult,
            execution_timeout=RETRY_TIMEOUT,
        )
    except WorkflowFailureError as exc:
        cause = exc.cause.cause if exc.cause is not None and exc.cause.cause is not None else exc.cause
        error = cause.message if isinstance(cause, ApplicationError) else str(cause or exc)
    except RPCError as exc:
        raise NothingToRetry(f"a renditions retry for task {task_id} is already running ({exc.message})") from exc
    after, _ = read_renditions(settings, task_id)
    return after.model_copy(update={"retried": True, "error": error})
