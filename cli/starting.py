"""Progress for the CLI: starting an import's workflows (control/imports.py) and waiting on them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from config.settings import Settings
from contracts.task import TaskStatus
from schema.db import Database
from schema.state_machine import TERMINAL

# Where `run --wait` stops waiting for a task: it ended, or nothing moves it until a person acts.
SETTLED_FOR_NOW: frozenset[TaskStatus] = TERMINAL | {TaskStatus.INVALID, TaskStatus.NEEDS_ATTENTION,
                                                      TaskStatus.REVIEW}


def start_import_tasks(settings: Settings, db: Database, import_id: str, total: int, *, show: bool) -> dict[str, int]:
    """`reelqueue run` (and `dev demo`): every task's workflow started, with a progress bar (hidden
    for --json) and a client of its own."""
    from adapters.temporal_client import connect
    from control.imports import start_import_workflows

    async def start() -> dict[str, int]:
        client = await connect(settings)
        with progress_bars(show) as progress:
            bar = progress.add_task("starting", total=total)
            return await start_import_workflows(client, db, import_id, settings.task_queue,
                                                on_start=lambda: progress.advance(bar))

    return asyncio.run(start())


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
