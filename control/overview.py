"""What an import's overview page shows (gateway/overview.py): counts by status and how they moved
over time, spend and waste (schema/spend.py), failures grouped by reason, the finished videos'
thumbnails and the tasks with their workflow ids. A few set-based queries a page; the counts, the
chart and the spend come from the import's running totals (schema/import_totals.py), not from its
tasks and state events; the failures, thumbnails and task list walk indexes of the import's tasks
(migration 0018) and read what they show (the failures and thumbnails at most a few thousand tasks).
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from contracts.task import TaskStatus
from schema import import_totals
from schema.models import CatalogImport
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

FAILURES_READ = 2_000  # failed tasks grouped by reason at most (the counts by status come from the totals)
THUMBNAILS_READ = 2_000  # SUCCEEDED tasks looked at for a thumbnail at most, per side of the scope
_FAILED_SQL = ", ".join(f"'{status}'" for status in FAILED)  # literal: the partial index's predicate

# Each read below takes the top of each side of the import's scope (schema/import_scope.py: the tasks
# it created, walked in an index of migration 0018, and the tasks it reused, `import_tasks`, less any
# it also created), then the top of the two: its cost is what it shows, not the import's size.
_FAILURES = text(f"""
WITH failed AS (
  (SELECT t.id FROM tasks t WHERE t.import_id = :imp AND t.status IN ({_FAILED_SQL}) ORDER BY t.id LIMIT :n)
  UNION ALL
  (SELECT t.id FROM import_tasks l JOIN tasks t ON t.id = l.task_id
    WHERE l.import_id = :imp AND t.import_id <> :imp AND t.status IN ({_FAILED_SQL}) ORDER BY t.id LIMIT :n)
  ORDER BY id LIMIT :n)
SELECT t.status, coalesce(t.last_error_class, '') AS error_class, coalesce(left(t.last_error, 300), '') AS error,
       count(*) AS n, (array_agg(t.id ORDER BY t.id))[1:{TASKS_PER_FAILURE}] AS task_ids,
       (array_agg(t.workflow_id ORDER BY t.id))[1:{TASKS_PER_FAILURE}] AS workflow_ids,
       (SELECT count(*) FROM failed) AS seen
  FROM (SELECT id FROM failed ORDER BY id LIMIT :n - 1) f JOIN tasks t ON t.id = f.id
 GROUP BY 1, 2, 3 ORDER BY n DESC, t.status, error_class, error
""")
# The latest thumbnail and proxy of each SUCCEEDED task (a regenerated task has one per attempt).
_THUMB = """JOIN LATERAL (SELECT a.key FROM renditions r JOIN assets a ON a.id = r.asset_id
                     WHERE r.task_id = t.id AND r.profile = 'THUMBNAIL' AND r.status = 'READY'
                     ORDER BY r.created_at DESC LIMIT 1) thumb ON true"""
# Per side, the newest THUMBNAILS_READ SUCCEEDED tasks are looked at (a SUCCEEDED task without a READY
# thumbnail is skipped: more of those than that before the SHOWN_THUMBNAILS-th would show fewer).
_THUMB_ORDER = "ORDER BY t.finished_at DESC NULLS LAST, t.id"
_THUMBNAILS = text(f"""
WITH top AS (
  (SELECT t.id, t.finished_at, thumb.key
     FROM (SELECT t.id, t.finished_at FROM tasks t WHERE t.import_id = :imp AND t.status = 'SUCCEEDED'
            {_THUMB_ORDER} LIMIT {THUMBNAILS_READ}) t {_THUMB}
    {_THUMB_ORDER} LIMIT {SHOWN_THUMBNAILS})
  UNION ALL
  (SELECT t.id, t.finished_at, thumb.key
     FROM (SELECT t.id, t.finished_at FROM import_tasks l JOIN tasks t ON t.id = l.task_id
            WHERE l.import_id = :imp AND t.import_id <> :imp AND t.status = 'SUCCEEDED'
            {_THUMB_ORDER} LIMIT {THUMBNAILS_READ}) t {_THUMB}
    {_THUMB_ORDER} LIMIT {SHOWN_THUMBNAILS})
  ORDER BY finished_at DESC NULLS LAST, id LIMIT {SHOWN_THUMBNAILS})
SELECT t.id AS task_id, t.product_id, t.locale, t.aspect_ratio, top.key AS thumbnail_key, proxy.key AS video_key
  FROM top JOIN tasks t ON t.id = top.id LEFT JOIN assets proxy ON proxy.id = t.output_asset_id
 ORDER BY top.finished_at DESC NULLS LAST, top.id
""")
# The route note of a task's latest attempt (routing), NULL without fallbacks.
_TASKS = text(f"""
WITH top AS (
  (SELECT t.id, t.updated_at FROM tasks t WHERE t.import_id = :imp
    ORDER BY t.updated_at DESC, t.id LIMIT {SHOWN_TASKS})
  UNION ALL
  (SELECT t.id, t.updated_at FROM import_tasks l JOIN tasks t ON t.id = l.task_id
    WHERE l.import_id = :imp AND t.import_id <> :imp ORDER BY t.updated_at DESC, t.id LIMIT {SHOWN_TASKS})
  ORDER BY updated_at DESC, id LIMIT {SHOWN_TASKS})
SELECT t.id, t.workflow_id, t.status, t.product_id, t.locale, t.aspect_ratio, t.updated_at, t.provider, t.model,
       (SELECT a.route_note FROM attempts a WHERE a.task_id = t.id ORDER BY a.attempt_no DESC LIMIT 1)
  FROM top JOIN tasks t ON t.id = top.id
 ORDER BY top.updated_at DESC, top.id
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
    failures_capped: bool = False  # more than FAILURES_READ failed: `failures` counts the first ones by id
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
    failures, capped = _failures(session, import_id)
    return Overview(import_id=import_id, catalog=imp.catalog, created_at=imp.created_at, total=total,
                    counts=counts, running=running, paused_by=imp.paused_by, times=times, bands=bands,
                    spend=import_spend(session, [import_id])[import_id], failures=failures, failures_capped=capped,
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


def _failures(session: Session, import_id: str) -> tuple[list[Failure], bool]:
    """Failed tasks grouped by reason, and whether the import has more than FAILURES_READ of them (the
    groups then count the first FAILURES_READ by id: ids are hashes, so a sample of the failures)."""
    rows = session.execute(_FAILURES, {"imp": import_id, "n": FAILURES_READ + 1}).mappings().all()
    return ([Failure(status=r["status"], error_class=r["error_class"], error=r["error"], count=r["n"],
                     tasks=list(zip(r["task_ids"], r["workflow_ids"], strict=True))) for r in rows],
            bool(rows) and rows[0]["seen"] > FAILURES_READ)


def _thumbnails(session: Session, import_id: str) -> list[Thumbnail]:
    return [Thumbnail(task_id=r["task_id"], label=f"{r['product_id']} · {r['locale']} · {r['aspect_ratio']}",
                      thumbnail_key=r["thumbnail_key"], video_key=r["video_key"])
            for r in session.execute(_THUMBNAILS, {"imp": import_id}).mappings()]


def _tasks(session: Session, import_id: str) -> list[TaskRow]:
    return [TaskRow(task_id=r[0], workflow_id=r[1], status=r[2], product_id=r[3], locale=r[4], aspect_ratio=r[5],
                    updated_at=r[6], route=f"{r[7]}/{r[8]}", route_note=r[9])
            for r in session.execute(_TASKS, {"imp": import_id})]
