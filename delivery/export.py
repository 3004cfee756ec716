"""`reelqueue export`: one row per finished video of an import, for shops and ad tools.

A row names the video (product, locale, ratio, variant, template version), the stored file (the
provider's output as we keep it: object key, sha256, size, duration, frame size) and links that
open without storage credentials: proxy MP4, HLS playlist and thumbnail through the gateway's
signed media links (delivery/links.py), all expiring at `urls_expire_at`. A rendition that is
missing (its own step failed) has an empty link. Tasks are read in pages, so an export of a large
import streams. CSV cells that a spreadsheet would evaluate are disarmed (catalog/csv_safe.py).
"""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Iterator
from datetime import datetime
from typing import TextIO

from pydantic import BaseModel
from sqlalchemy import select

from catalog.csv_safe import safe_row
from contracts.task import TaskStatus
from delivery.links import LinkSigner
from schema.db import Database
from schema.import_scope import in_import
from schema.models import Asset, Task

PAGE = 500
MASTER = "RAW_OUTPUT"
LINKED = {"PROXY": "proxy_url", "HLS": "hls_url", "THUMBNAIL": "thumbnail_url"}


class ExportRow(BaseModel):
    task_id: str
    product_id: str
    locale: str
    aspect_ratio: str
    variant: str
    template_id: str
    template_version: str
    object_key: str
    sha256: str
    size_bytes: int
    duration_s: float | None
    width: int | None
    height: int | None
    proxy_url: str | None = None
    hls_url: str | None = None
    thumbnail_url: str | None = None
    urls_expire_at: datetime


FIELDS = list(ExportRow.model_fields)


def _finished_tasks(db: Database, import_id: str) -> Iterator[list[Task]]:
    after = ""
    while True:
        with db.transaction() as session:
            page = list(session.scalars(
                select(Task)
                .where(in_import(import_id), Task.status == TaskStatus.SUCCEEDED.value,
                       Task.id > after)
                .order_by(Task.id).limit(PAGE)
            ))
            session.expunge_all()
        if not page:
            return
        yield page
        after = page[-1].id


def _latest_assets(db: Database, task_ids: list[str]) -> dict[str, dict[str, Asset]]:
    """Per task, its newest asset of each kind (a redriven or re-transcoded task keeps older rows)."""
    out: dict[str, dict[str, Asset]] = {}
    with db.transaction() as session:
        rows = session.scalars(select(Asset).where(Asset.task_id.in_(task_ids)).order_by(Asset.created_at))
        for asset in rows:
            out.setdefault(asset.task_id, {})[asset.kind] = asset
        session.expunge_all()
    return out


def export_rows(db: Database, signer: LinkSigner, import_id: str, ttl_s: float) -> Iterator[ExportRow]:
    """The finished videos of `import_id`, task id order; a SUCCEEDED task without a stored output is skipped.
    Every link of one export expires at the same moment."""
    now = time.time()
    for page in _finished_tasks(db, import_id):
        assets = _latest_assets(db, [t.id for t in page])
        for task in page:
            kinds = assets.get(task.id, {})
            master = kinds.get(MASTER)
            if master is None:
                continue
            links = {field: signer.link(kinds[kind].key, ttl_s, now=now) for kind, field in LINKED.items()
                     if kind in kinds}
            expires = signer.link(master.key, ttl_s, now=now).expires_at
            yield ExportRow(
                task_id=task.id, product_id=task.product_id, locale=task.locale, aspect_ratio=task.aspect_ratio,
                variant=task.variant, template_id=task.template_id, template_version=task.template_version,
                object_key=master.key, sha256=master.sha256, size_bytes=master.size,
                duration_s=float(master.duration_s) if master.duration_s is not None else None,
                width=master.width, height=master.height, urls_expire_at=expires,
                **{field: link.url for field, link in links.items()},
            )


def write_csv(rows: Iterator[ExportRow], out: TextIO) -> int:
    writer = csv.DictWriter(out, fieldnames=FIELDS)
    writer.writeheader()
    n = 0
    for row in rows:
        writer.writerow(safe_row(row.model_dump(mode="json")))
        n += 1
    return n


def json_chunks(rows: Iterator[ExportRow], import_id: str, counted: list[int] | None = None) -> Iterator[str]:
    """One JSON object: {"import_id", "videos": [...]}, row by row (`reelqueue export --format json`
    writes it to a file, `GET /v1/imports/{id}/export` streams it); `counted` gets the row count."""
    yield f'{{"import_id": {json.dumps(import_id)}, "videos": ['
    n = 0
    for row in rows:
        yield ("," if n else "") + "\n  " + row.model_dump_json()
        n += 1
    yield "\n]}\n"
    if counted is not None:
        counted.append(n)


def write_json(rows: Iterator[ExportRow], out: TextIO, import_id: str) -> int:
    counted: list[int] = []
    for chunk in json_chunks(rows, import_id, counted):
        out.write(chunk)
    return counted[0]
