"""What an import's overview page shows (gateway/overview.py): counts by status and how they moved
over time, spend and waste (schema/spend.py), failures grouped by reason, the finished videos'
thumbnails and the tasks with their workflow ids. A few set-based queries a page; the counts, the
chart and the spend come from the import's running totals (schema/import_totals.py), not from its
tasks and state events.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel
from sqlalchemy import bindparam, func, select, text
from sqlalchemy.orm import Session

from contracts.task import TaskStatus
from schema import import_totals
from schema.import_scope import in_import
from schema.models import Attempt, CatalogImport, Task
from schema.spend import NO_JIT, Spend, import_spend
from schema.state_machine import TERMINAL

BUCKETS = 48  # points of the progress chart
SHOWN_TASKS = 200  # tasks listed with their workflow link (the most recently changed first)
SHOWN_THUMBNAILS = 60
TASKS_PER_FAILURE = 20
# The chart's bands, bottom to top; every status belongs to one.
BANDS: dict[str, tuple[TaskStatus, ...]] = {
    "succeeded": (TaskStatus.SUCCEEDED,),
    "failed": (TaskStatus.FAILED_FINAL, TaskStatus.EXPIRED, TaskStatus.CANCELED, TaskStatus.REJECTED,
               TaskStatus.INVALID),
    "waiting for a person": (TaskStatus.REVIEW, TaskStatus.NEEDS_ATTENTION, TaskStatus.CANCEL_REQUESTED),
    "fetching and transcoding": (TaskStatus.OUTPUT_FETCHING, TaskStatus.POST_PROCESSING),
    "at the provider": (TaskStatus.DISPATCHING, TaskStatus.SUBMITTED, TaskStatus.SUBMIT_UNKNOWN, TaskStatus.RUNNING),
    "waiting": (TaskStatus.CREATED, TaskStatus.VALIDATING, TaskStatus.QUOTA_RESERVED, TaskStatus.QUEUED,
                TaskStatus.RETRY_WAIT),
}
BAND_OF = {status.value: band for band, statuses in BANDS.items() for status in statuses}
FAILED = [s.value for s in BANDS["failed"]] + [TaskStatus.NEEDS_ATTENTION.value]
SETTLED = frozenset(s.value for s in TERMINAL) | {TaskStatus.INVALID.value}  # nothing more will happen

_SCOPE = "SELECT id FROM tasks WHERE import_id = :imp UNION ALL SELECT task_id FROM import_tasks WHERE import_id = :imp"
_FAILURES = text(f"""
WITH scope AS ({_SCOPE})
SELECT t.status, coalesce(t.last_error_class, '') AS error_class, coalesce(left(t.last_error, 300), '') AS error,
       count(*) AS n, (array_agg(t.id ORDER BY t.id))[1:{TASKS_PER_FAILURE}] AS task_ids,
       (array_agg(t.workflow_id ORDER BY t.id))[1:{TASKS_PER_FAILURE}] AS workflow_ids
  FROM tasks t WHERE t.id IN (SELECT id FROM scope) AND t.status IN :failed
 GROUP BY 1, 2, 3 ORDER BY n DESC, t.status, error_class, error
""").bindparams(bindparam("failed", expanding=True))
# The latest thumbnail and proxy of each SUCCEEDED task (a regenerated task has one per attempt).
_THUMBNAILS = text(f"""
WITH scope AS ({_SCOPE})
SELECT t.id AS task_id, t.product_id, t.locale, t.aspect_ratio, thumb.key AS thumbnail_key, proxy.key AS video_key
  FROM tasks t
  JOIN LATERAL (SELECT a.key FROM renditions r JOIN assets a ON a.id = r.asset_id
                 WHERE r.task_id = t.id AND r.profile = 'THUMBNAIL' AND r.status = 'READY'
                 ORDER BY r.created_at DESC LIMIT 1) thumb ON true
  LEFT JOIN assets proxy ON proxy.id = t.output_asset_id
 WHERE t.id IN (SELECT id FROM scope) AND t.status = 'SUCCEEDED'
 ORDER BY t.finished_at DESC NULLS LAST, t.id LIMIT {SHOWN_THUMBNAILS}
""")


class Failure(BaseModel):
    status: str
    error_class: str
    error: str
    count: int
    tasks: list[tuple[str, str]]  # (task id, workflow id), the first few


class Thumbnail(BaseModel):
    task_id: str
    label: str
    thumbnail_key: str
    video_key: str | None


class TaskRow(BaseModel):
    task_id: str
    workflow_id: str
    status: str
    product_id: str
    locale: str
    aspect_ratio: str
    updated_at: datetime
    route: str = ""  # provider/model of its latest attempt (or of its template, before any)
    route_note: str | None = None  # why its latest attempt took that route (routing), None without fallbacks


class Overview(BaseModel):
    import_id: str
    catalog: str
    created_at: datetime
    total: int
    counts: dict[str, int]
    running: bool  # some task may still move: the page refreshes itself
    paused_by: str | None = None  # `reelqueue pause`: who holds the import
    times: list[datetime]  # the end of each chart bucket
    bands: dict[str, list[int]]  # band -> tasks in it at each time
    spend: Spend
    failures: list[Failure]
    thumbnails: list[Thumbnail]
    tasks: list[TaskRow]


def overview(session: Session, import_id: str) -> Overview | None:
    """The import's overview, or None when there is no such import."""
    imp = session.get(CatalogImport, import_id)
    if imp is None:
        return None
    session.execute(NO_JIT)
    counts = import_totals.status_counts(session, import_id)
    total = sum(counts.values())
    running = any(status not in SETTLED for status in counts)
    times, bands = _progress(session, import_id, imp.created_at, total, running)
    return Overview(import_id=import_id, catalog=imp.catalog, created_at=imp.created_at, total=total,
                    counts=counts, running=running, paused_by=imp.paused_by, times=times, bands=bands,
                    spend=import_spend(session, [import_id])[import_id], failures=_failures(session, import_id),
                    thumbnails=_thumbnails(session, import_id), tasks=_tasks(session, import_id))


def _progress(session: Session, import_id: str, start: datetime, total: int,
              running: bool) -> tuple[list[datetime], dict[str, list[int]]]:
    """Tasks per band at the end of each of BUCKETS equal slices from the import to now (or to the
    end of its last minute with a move once nothing can move). Each applied transition takes one task
    out of its old status and into the new one: summed per bucket, the moves (counted per minute,
    import_moves) give the count in every status at the end of each bucket."""
    last = import_totals.last_move(session, import_id)
    end = session.scalar(select(func.now())) if running or last is None else last
    lo, hi = start.timestamp(), max(end.timestamp(), start.timestamp() + 1)
    deltas = import_totals.moves(session, import_id, lo, hi, BUCKETS)
    now = {TaskStatus.CREATED.value: total}  # every task starts CREATED
    bands: dict[str, list[int]] = {band: [] for band in BANDS}
    for bucket in range(1, BUCKETS + 1):
        for status, delta in deltas.get(bucket, {}).items():
            now[status] = now.get(status, 0) + delta
        for band in bands:
            bands[band].append(0)
        for status, n in now.items():
            bands[BAND_OF.get(status, "waiting")][-1] += n
    step = (hi - lo) / BUCKETS
    times = [datetime.fromtimestamp(lo + step * b, tz=start.tzinfo) for b in range(1, BUCKETS + 1)]
    return times, bands


def _failures(session: Session, import_id: str) -> list[Failure]:
    rows = session.execute(_FAILURES, {"imp": import_id, "failed": FAILED}).mappings()
    return [Failure(status=r["status"], error_class=r["error_class"], error=r["error"], count=r["n"],
                    tasks=list(zip(r["task_ids"], r["workflow_ids"], strict=True))) for r in rows]


def _thumbnails(session: Session, import_id: str) -> list[Thumbnail]:
    return [Thumbnail(task_id=r["task_id"], label=f"{r['product_id']} · {r['locale']} · {r['aspect_ratio']}",
                      thumbnail_key=r["thumbnail_key"], video_key=r["video_key"])
            for r in session.execute(_THUMBNAILS, {"imp": import_id}).mappings()]


def _tasks(session: Session, import_id: str) -> list[TaskRow]:
    note = (select(Attempt.route_note).where(Attempt.task_id == Task.id)
            .order_by(Attempt.attempt_no.desc()).limit(1).scalar_subquery())
    stmt = (select(Task.id, Task.workflow_id, Task.status, Task.product_id, Task.locale, Task.aspect_ratio,
                   Task.updated_at, Task.provider, Task.model, note).where(in_import(import_id))
            .order_by(Task.updated_at.desc(), Task.id).limit(SHOWN_TASKS))
    return [TaskRow(task_id=r[0], workflow_id=r[1], status=r[2], product_id=r[3], locale=r[4], aspect_ratio=r[5],
                    updated_at=r[6], route=f"{r[7]}/{r[8]}", route_note=r[9]) for r in session.execute(stmt)]
