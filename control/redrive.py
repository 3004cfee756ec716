"""`reelqueue retry`: a new run of tasks that ended without a video (FAILED_FINAL, EXPIRED,
CANCELED), or of INVALID tasks whose cause can change (a provider's key, an image fetch): those are
validated again (a `revalidate` event, INVALID -> VALIDATING) and run on if they pass now. Each
redrive is a state event naming who and why; the task goes back to CREATED with its
run number raised, so the new run has its own workflow id (`gen-{task}-run{n}`), its own
reservation and ledger keys (each run balances on its own) and continues the attempt numbering
(new request keys). SUCCEEDED and REJECTED tasks are never re-run; a task that ended with a paid
video (expired or cancelled in REVIEW) only when asked for with `with_video`.
"""

from __future__ import annotations

from pydantic import BaseModel
from sqlalchemy import select

from activities.tasks import revalidatable
from adapters.temporal_client import connect
from config.settings import Settings
from contracts import workflow_api as api
from contracts.task import TaskEvent, TaskStatus
from control.starting import start_workflows
from schema import queries, task_store
from schema.db import Database
from schema.models import Task
from schema.state_machine import REDRIVABLE

RERUNNABLE = frozenset({*(s.value for s in REDRIVABLE), TaskStatus.INVALID.value})


class RedriveRefused(ValueError):
    """Bad input: an unknown import or task, or a status that is never re-run."""


class RedrivePlan(BaseModel):
    import_id: str
    tasks: list[dict]  # task summaries (with the run they would get)
    redriven: int = 0
    started: int = 0
    dry_run: bool = False


def select_tasks(db: Database, import_id: str, statuses: list[str], task_id: str | None, *,
                 with_video: bool = False) -> list[Task]:
    """The tasks to re-run; those with a video (already rendered and paid for) only `with_video`."""
    wrong = sorted(set(statuses) - RERUNNABLE)
    if wrong:
        raise RedriveRefused(f"only {', '.join(sorted(RERUNNABLE))} can be re-run, not {', '.join(wrong)}")
    with db.transaction() as session:
        if not queries.import_exists(session, import_id):
            raise RedriveRefused(f"no import {import_id}")
        tasks = [t for t in queries.list_tasks(session, import_id) if t.status in statuses]
    if task_id is not None:
        tasks = [t for t in tasks if t.id == task_id]
        if not tasks:
            raise RedriveRefused(f"task {task_id} is not in {import_id} with status {', '.join(statuses)}")
        if tasks[0].status == TaskStatus.INVALID.value and not revalidatable(tasks[0].last_error):
            raise RedriveRefused(f"task {task_id} is INVALID for a cause a new run does not change "
                                 f"({tasks[0].last_error}): fix the catalog or plan and import again")
        if tasks[0].output_asset_id is not None and not with_video:
            raise RedriveRefused(f"task {task_id} ended with a paid video (it expired or was cancelled in "
                                 f"{TaskStatus.REVIEW.value}); pass --with-video to render and pay for it again")
    tasks = [t for t in tasks if t.status != TaskStatus.INVALID.value or revalidatable(t.last_error)]
    return [t for t in tasks if with_video or t.output_asset_id is None]


async def redrive(settings: Settings, import_id: str, statuses: list[str], *, task_id: str | None = None,
                  with_video: bool = False, dry_run: bool = False, by: str, reason: str) -> RedrivePlan:
    db = Database(settings.database_url)
    tasks = select_tasks(db, import_id, statuses, task_id, with_video=with_video)
    plan = RedrivePlan(import_id=import_id, dry_run=dry_run,
                       tasks=[{**queries.task_summary(t), "next_run": t.run_no + 1} for t in tasks])
    if dry_run or not tasks:
        return plan
    moved: list[str] = []
    for task in tasks:  # one short transaction each; the workflow starts after, outside any
        run = task.run_no + 1
        event, begins = ((TaskEvent.REVALIDATE, TaskStatus.VALIDATING) if task.status == TaskStatus.INVALID.value
                         else (TaskEvent.REDRIVE, TaskStatus.CREATED))
        with db.transaction() as session:
            out = task_store.transition(
                session, task.id, event, source="cli", source_event_id=f"{task.id}:{event.value}:{run}",
                payload={"by": by, "reason": reason, "run": run},
                task_updates={"run_no": run, "workflow_id": api.workflow_id(task.id, run),
                              "last_error": None, "last_error_class": None, "cancel_outcome": None,
                              "finished_at": None,
                              # the new run opts in again in its prepare step (a worker of older code
                              # would otherwise miss its job's RUNNING signals)
                              "quiet_progress": False},
            )
        if out.applied and out.status == begins:
            moved.append(task.id)
    with db.transaction() as session:
        fresh = list(session.scalars(select(Task).where(Task.id.in_(moved))))
    client = await connect(settings)
    started = await start_workflows(client, fresh, import_id, settings.task_queue)
    plan.redriven, plan.started = len(moved), started["started"]
    return plan
