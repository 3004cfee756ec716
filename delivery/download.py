"""`reelqueue export IMPORT_ID --download DIR`: copy the videos with a manifest, resumable, verified.

Each video goes to `DIR/<product>_<template>_<locale>_<ratio>_<variant>_<task8>.mp4`. A file that
is already there with the row's sha256 is left alone (a second run copies nothing). A partial copy
(`.part`) resumes from its length with a ranged read; whatever was copied is hashed in full before
it is renamed into place, and a copy whose sha256 differs from the row's is deleted and counted as
failed, never kept. `manifest.json` lists every row with its file name; it is rewritten on each run.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path

from pydantic import BaseModel

from adapters.storage import ObjectStorage, file_sha256
from delivery.export import ExportRow

MANIFEST = "manifest.json"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")  # no dots: a part can never be ".." or hide a suffix


class ManifestEntry(ExportRow):
    file: str


class Manifest(BaseModel):
    import_id: str
    videos: list[ManifestEntry]


class DownloadSummary(BaseModel):
    import_id: str
    directory: str
    manifest: str
    videos: int = 0
    copied: int = 0  # new or resumed copies, verified
    resumed: int = 0  # of the copied: continued from a partial file
    present: int = 0  # already there with the right sha256
    failed: list[str] = []  # file names whose copy did not match its sha256 (deleted)
    bytes_copied: int = 0


def file_name(row: ExportRow) -> str:
    parts = (row.product_id, row.template_id, row.locale, row.aspect_ratio.replace(":", "x"), row.variant,
             row.task_id[:8])
    return "_".join(_UNSAFE.sub("-", p).strip("-") or "x" for p in parts) + ".mp4"


def _copy(storage: ObjectStorage, row: ExportRow, target: Path) -> tuple[int, bool, bool]:
    """(bytes copied, resumed, verified) for one video into `target` through `target.part`."""
    part = target.with_name(target.name + ".part")
    offset = part.stat().st_size if part.exists() else 0
    if offset > row.size_bytes:
        part.unlink()
        offset = 0
    copied = 0
    if offset < row.size_bytes:
        with open(part, "ab") as out:
            for chunk in storage.iter_object(row.object_key, offset=offset, length=row.size_bytes - offset):
                out.write(chunk)
                copied += len(chunk)
    sha, size = file_sha256(part)
    if sha != row.sha256 or size != row.size_bytes:
        part.unlink()
        return copied, offset > 0, False
    part.replace(target)
    return copied, offset > 0, True


def download(
    storage: ObjectStorage, import_id: str, rows: Iterable[ExportRow], directory: Path,
    progress: Callable[[ExportRow], None] | None = None,
) -> DownloadSummary:
    directory.mkdir(parents=True, exist_ok=True)
    summary = DownloadSummary(import_id=import_id, directory=str(directory), manifest=str(directory / MANIFEST))
    entries: list[ManifestEntry] = []
    for row in rows:
        name = file_name(row)
        target = directory / name
        summary.videos += 1
        if target.exists() and file_sha256(target)[0] == row.sha256:
            summary.present += 1
        else:
            copied, resumed, ok = _copy(storage, row, target)
            summary.bytes_copied += copied
            if ok:
                summary.copied += 1
                summary.resumed += int(resumed)
            else:
                summary.failed.append(name)
        entries.append(ManifestEntry(**row.model_dump(), file=name))
        if progress is not None:
            progress(row)
    manifest = Manifest(import_id=import_id, videos=entries).model_dump_json(indent=2)
    tmp = directory / (MANIFEST + ".tmp")
    tmp.write_text(manifest)
    tmp.replace(directory / MANIFEST)
    return summary

