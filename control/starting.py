"""Starting the generation workflows of tasks: one workflow per task, its search attributes and its
Web UI summary, never a second start for an id that already ran. The CLI (`run`), the API's outbox
sweeper, redrive, the drills and the benchmarks all start tasks here (the client is injected, as in
the samples)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Protocol

from temporalio.client import Client
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from contracts import workflow_api as api
from contracts.messages import GenerationInput
from contracts.task import TaskStatus
from schema.state_machine import TERMINAL
from workflows import search_attributes as sa
from workflows.generation import GenerationWorkflow

START_CONCURRENCY = 16


class TaskToStart(Protocol):
    """What starting a task's workflow reads: a Task row, or a row of queries.START_COLUMNS."""

    id: str
    workflow_id: str
    status: str
    run_no: int
    product_id: str
    template_id: str
    locale: str
    aspect_ratio: str
    provider: str


def shown_at_start(task: TaskToStart) -> str:
    """The TaskStatus a run begins with: a new task is validated at once, so RUNNING; a task restarted
    elsewhere, where its status shows it."""
    status = TaskStatus(task.status)
    return TaskStatus.RUNNING.value if status is TaskStatus.CREATED else sa.shown_status(status)


def search_attributes_for(task: TaskToStart, import_id: str) -> TypedSearchAttributes:
    return TypedSearchAttributes([
        SearchAttributePair(sa.TASK_STATUS, shown_at_start(task)),
        SearchAttributePair(sa.IMPORT_ID, import_id),
        SearchAttributePair(sa.PRODUCT_ID, task.product_id),
        SearchAttributePair(sa.LOCALE, task.locale),
        SearchAttributePair(sa.ASPECT_RATIO, task.aspect_ratio),
        SearchAttributePair(sa.PROVIDER, task.provider),
    ])


async def start_workflows(client: Client, tasks: Iterable[TaskToStart], import_id: str, task_queue: str,
                          on_start: Callable[[], None] | None = None) -> dict[str, int]:
    """Start one workflow per task, START_CONCURRENCY at a time; an id that already ran is never started again.

    `tasks` is consumed lazily (a paged query for large imports), so memory does not grow with the
    import; `on_start` is told after every task, started or not (a progress bar)."""
    counts = {"started": 0, "already_started": 0, "already_finished": 0}
    pending = iter(tasks)

    async def starter() -> None:
        for task in pending:  # the shared iterator hands each task to exactly one starter
            counts[await _start_one(client, task, import_id, task_queue)] += 1
            if on_start is not None:
                on_start()

    await asyncio.gather(*(starter() for _ in range(START_CONCURRENCY)))
    return counts


async def _start_one(client: Client, task: TaskToStart, import_id: str, task_queue: str) -> str:
    if task.status in TERMINAL:
        return "already_finished"
    try:
        await client.start_workflow(
            GenerationWorkflow.run, GenerationInput(task_id=task.id, run=task.run_no), id=task.workflow_id,
            task_queue=task_queue, id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            search_attributes=search_attributes_for(task, import_id),
            memo={api.MEMO_SHOWN_STATUS: shown_at_start(task)},  # the run skips upserting it again
            static_summary=api.summary(task.product_id, task.template_id, task.locale, task.aspect_ratio),
        )
    except WorkflowAlreadyStartedError:
        return "already_started"
    return "started"
