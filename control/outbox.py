"""The start outbox of API tasks: a committed task whose workflow may not exist yet is started here.

The gateway starts a task's workflow right after the create commits and marks its row; a gateway
that died (or lost Temporal) between the two leaves the row pending, and the worker's sweeper
(`run_sweeper`, started by worker.py) starts it. Starting twice is harmless: the workflow id is the
task's and the start path (control.starting) uses REJECT_DUPLICATE, so a second start is "already
started" and the row is marked all the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from itertools import groupby

from sqlalchemy import select, update
from temporalio.client import Client

from control.starting import start_workflows
from schema.db import Database
from schema.models import Task, TaskOutbox
from schema.queries import START_COLUMNS

log = logging.getLogger(__name__)
SWEEP_EVERY_S = 5.0
SWEEP_MIN_AGE_S = 10.0  # a row younger than this is the gateway's own start, probably in flight
SWEEP_BATCH = 200


def pending(db: Database, *, task_ids: Iterable[str] | None = None, min_age_s: float = 0.0,
            limit: int = SWEEP_BATCH) -> list:
    """Outbox rows not marked started (oldest first), as rows the start path reads, with import_id."""
    stmt = (select(*START_COLUMNS, Task.import_id).join(TaskOutbox, TaskOutbox.task_id == Task.id)
            .where(TaskOutbox.started_at.is_(None)).order_by(TaskOutbox.created_at).limit(limit))
    if task_ids is not None:
        stmt = stmt.where(TaskOutbox.task_id.in_(list(task_ids)))
    if min_age_s > 0:
        stmt = stmt.where(TaskOutbox.created_at < datetime.now(UTC) - timedelta(seconds=min_age_s))
    with db.transaction() as session:
        return list(session.execute(stmt).all())


async def start_pending(db: Database, client: Client, task_queue: str, *, task_ids: Iterable[str] | None = None,
                        min_age_s: float = 0.0) -> dict[str, int]:
    """Start the pending rows' workflows (the CLI's start path, per import) and mark them started."""
    rows = await asyncio.to_thread(pending, db, task_ids=task_ids, min_age_s=min_age_s)
    counts = {"started": 0, "already_started": 0, "already_finished": 0}
    for import_id, group in groupby(sorted(rows, key=lambda r: r.import_id), key=lambda r: r.import_id):
        tasks = list(group)
        for name, n in (await start_workflows(client, tasks, import_id, task_queue)).items():
            counts[name] += n
        await asyncio.to_thread(_mark_started, db, [t.id for t in tasks])
    return counts


def _mark_started(db: Database, task_ids: list[str]) -> None:
    with db.transaction() as session:
        session.execute(update(TaskOutbox).where(TaskOutbox.task_id.in_(task_ids), TaskOutbox.started_at.is_(None))
                        .values(started_at=datetime.now(UTC)))


async def run_sweeper(db: Database, client: Client, task_queue: str, stop: asyncio.Event, *,
                      every_s: float = SWEEP_EVERY_S, min_age_s: float = SWEEP_MIN_AGE_S) -> None:
    """Until `stop`: every `every_s`, start the rows older than `min_age_s`. A failed sweep (Postgres or
    Temporal away) is logged and tried again at the next tick."""
    while not stop.is_set():
        try:
            counts = await start_pending(db, client, task_queue, min_age_s=min_age_s)
            if counts["started"]:
                log.info("outbox: started %d API task workflows the gateway had not", counts["started"])
        except Exception:  # noqa: BLE001 - the sweeper outlives any one failure
            log.exception("outbox sweep failed; retrying in %.0f s", every_s)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s)
