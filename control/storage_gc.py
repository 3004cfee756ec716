"""`reelqueue gc`: remove staging objects that crashed attempts left behind; report objects no row names.

What a row refers to is never touched: an asset's key, the segments its HLS playlist lists, an
import's raw catalog file, the quarantine key of an upload awaiting its complete. Only staging
objects (`.../staging/...`, written by an output fetch before the bytes are verified and promoted)
and upload quarantine objects no open upload names (put back through an upload URL after complete,
or left by a crash) are removed, and only once they are older than the safety window, so a fetch
still streaming into its staging key is left alone. Everything else
without a row (a write-once conflict's set-aside bytes, an object whose row was never written) is
reported for a person to decide.

The bucket is read page by page in key order; each page costs one query, which finds the rows of
the tasks the page's keys belong to (keys are `tenants/{t}/tasks/{task}/...`, `assets.task_id` is
indexed), so memory and time grow with the page, not with the bucket.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from itertools import islice

from pydantic import BaseModel
from sqlalchemy import or_, select

from adapters.storage import ListedObject, ObjectStorage
from schema.db import Database
from schema.models import Asset, CatalogImport, Upload
from schema.uploads import OPEN as OPEN_UPLOADS

PAGE = 1000
SHOWN = 1000  # objects listed per category in the report (the counts are always complete)
_TASK_KEY = re.compile(r"^tenants/[^/]+/tasks/([^/]+)/")
STAGING_PART = "/staging/"
QUARANTINE_PART = "/uploads/quarantine/"  # an upload's bytes before complete; after it, what its URL put back


class GcObject(BaseModel):
    key: str
    size: int
    last_modified: datetime | None


class GcReport(BaseModel):
    prefix: str
    dry_run: bool
    min_age_s: float
    scanned: int = 0
    referenced: int = 0
    staging_removed: int = 0  # with --dry-run: would be removed
    staging_removed_bytes: int = 0
    staging_young: int = 0  # staging objects inside the safety window: kept
    unreferenced: int = 0  # not staging, no row names them: reported, kept
    unreferenced_bytes: int = 0
    removed: list[GcObject] = []
    unreferenced_objects: list[GcObject] = []


def task_of(key: str) -> str | None:
    match = _TASK_KEY.match(key)
    return match.group(1) if match else None


def referenced_keys(db: Database, keys: list[str]) -> set[str]:
    """The subset of `keys` that some row refers to."""
    tasks = {t for t in map(task_of, keys) if t}
    with db.transaction() as session:
        rows = session.execute(
            select(Asset.key, Asset.meta).where(or_(Asset.key.in_(keys), Asset.task_id.in_(tasks)))
        ).all()
        raw_files = set(session.scalars(select(CatalogImport.raw_key).where(CatalogImport.raw_key.in_(keys))))
        awaited = set(session.scalars(select(Upload.quarantine_key).where(Upload.quarantine_key.in_(keys),
                                                                          Upload.status.in_(OPEN_UPLOADS))))
    named = raw_files | awaited
    for key, meta in rows:
        named.add(key)
        named.update((meta or {}).get("segments") or [])
    return named & set(keys)


def pages(objects: Iterable[ListedObject]) -> Iterator[list[ListedObject]]:
    it = iter(objects)
    while page := list(islice(it, PAGE)):
        yield page


def collect_garbage(
    db: Database, storage: ObjectStorage, *, prefix: str = "tenants/", min_age: timedelta, dry_run: bool,
    now: datetime | None = None, progress: Callable[[int], None] | None = None,
) -> GcReport:
    """One pass over `prefix`: remove old unreferenced staging objects, count and list the rest."""
    now = now or datetime.now(UTC)
    report = GcReport(prefix=prefix, dry_run=dry_run, min_age_s=min_age.total_seconds())
    for page in pages(storage.list_objects(prefix)):
        named = referenced_keys(db, [o.key for o in page])
        for obj in page:
            report.scanned += 1
            entry = GcObject(key=obj.key, size=obj.size, last_modified=obj.last_modified)
            if obj.key in named:
                report.referenced += 1
            elif STAGING_PART in obj.key or QUARANTINE_PART in obj.key:
                if obj.last_modified is not None and now - obj.last_modified < min_age:
                    report.staging_young += 1
                    continue
                if not dry_run:
                    storage.remove(obj.key)
                report.staging_removed += 1
                report.staging_removed_bytes += obj.size
                if len(report.removed) < SHOWN:
                    report.removed.append(entry)
            else:
                report.unreferenced += 1
                report.unreferenced_bytes += obj.size
                if len(report.unreferenced_objects) < SHOWN:
                    report.unreferenced_objects.append(entry)
        if progress is not None:
            progress(len(page))
    return report
