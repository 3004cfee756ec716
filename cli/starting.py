"""Progress for the CLI: starting an import's workflows (control/starting.py) and waiting on them."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from temporalio.client import Client

from control.starting import TaskToStart, start_workflows
from schema.state_machine import TERMINAL, TaskStatus

# Where `run --wait` stops waiting for a task: it ended, or nothing moves it until a person acts.
SETTLED_FOR_NOW: frozenset[TaskStatus] = TERMINAL | {TaskStatus.INVALID, TaskStatus.NEEDS_ATTENTION,
                                                      TaskStatus.REVIEW}


async def start_with_progress(client: Client, tasks: Iterable[TaskToStart], total: int, import_id: str,
                              task_queue: str, *, show: bool) -> dict[str, int]:
    """start_workflows with a progress bar (hidden for --json)."""
    with progress_bars(show) as progress:
        bar = progress.add_task("starting", total=total)
        return await start_workflows(client, tasks, import_id, task_queue,
                                     on_start=lambda: progress.advance(bar))


def progress_bars(show: bool, *, transient: bool = False) -> Progress:
    return Progress(TextColumn("{task.description:<18}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    disable=not show, transient=transient)


def wait_with_progress(
    read_counts: Callable[[], dict[str, int]], total: int, *, show: bool, timeout_s: float, poll_s: float = 1.0
) -> dict[str, int]:
    """Poll Postgres until every task ended or waits for a person; one progress bar per status."""
    deadline = time.monotonic() + timeout_s
    counts = read_counts()
    with progress_bars(show) as progress:
        bars: dict[str, int] = {}
        while True:
            for status in TaskStatus:  # a bar per status that holds tasks now (terminal ones stay)
                n = counts.get(status.value, 0)
                if status.value not in bars and n:
                    bars[status.value] = progress.add_task(status.value, total=total)
                if status.value in bars:
                    keep = n > 0 or status in SETTLED_FOR_NOW
                    progress.update(bars[status.value], completed=n, visible=keep)
            if sum(counts.get(s.value, 0) for s in SETTLED_FOR_NOW) >= total or time.monotonic() > deadline:
                return counts
            time.sleep(poll_s)
            counts = read_counts()
