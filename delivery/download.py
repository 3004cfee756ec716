"""`reelqueue export IMPORT_ID --download DIR`: copy the videos with a manifest, resumable, verified.

Each video goes to `DIR/<product>_<template>_<locale>_<ratio>_<variant>_<task8>.mp4`, cut to a bounded
length with a hash of the whole name when it is longer (a product id may be any length). A file that
is already there with the row's sha256 is left alone (a second run copies nothing). A partial copy
(`.part`) resumes from its length with a ranged read; whatever was copied is hashed in full before
it is renamed into place, and a copy whose sha256 differs from the row's is deleted and counted as
failed, never kept. A video that cannot be copied (storage error, file system refusal) is counted as
failed with its reason and the run goes on. `manifest.json` lists every row with its file name; it is
rewritten on each run.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Iterable
from pathlib import Path

from pydantic import BaseModel

from adapters.storage import ObjectStorage, file_sha256
from delivery.export import ExportRow

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")  # no dots: a part can never be ".." or hide a suffix
MAX_STEM = 160  # characters (ASCII) before ".mp4"; with ".part" well under the usual 255-byte limit
_HASH_CHARS = 16


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
    failed: list[str] = []  # file names whose copy did not match its sha256 (deleted) or could not be made
    errors: dict[str, str] = {}  # file name -> why it could not be copied (besides a sha256 mismatch)
    bytes_copied: int = 0


def file_name(row: ExportRow) -> str:
    parts = (row.product_id, row.template_id, row.locale, row.aspect_ratio.replace(":", "x"), row.variant,
             row.task_id[:8])
    stem = "_".join(_UNSAFE.sub("-", p).strip("-") or "x" for p in parts)
    if len(stem) > MAX_STEM:
        digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:_HASH_CHARS]
        stem = f"{stem[:MAX_STEM - _HASH_CHARS - 1]}_{digest}"
    return stem + ".mp4"


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


def _fetch(storage: ObjectStorage, row: ExportRow, target: Path, summary: DownloadSummary) -> None:
    """Copy one video unless it is already there; counts go to `summary`."""
    if target.exists() and file_sha256(target)[0] == row.sha256:
        summary.present += 1
        return
    copied, resumed, ok = _copy(storage, row, target)
    summary.bytes_copied += copied
    if ok:
        summary.copied += 1
        summary.resumed += int(resumed)
    else:
        summary.failed.append(target.name)


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
        try:
            _fetch(storage, row, target, summary)
        except Exception as exc:  # noqa: BLE001 - one video's failure is reported; the others are still copied
            log.warning("download of %s failed: %s", name, exc)
            summary.failed.append(name)
            summary.errors[name] = f"{type(exc).__name__}: {exc}"
        entries.append(ManifestEntry(**row.model_dump(), file=name))
        if progress is not None:
            progress(row)
    manifest = Manifest(import_id=import_id, videos=entries).model_dump_json(indent=2)
    tmp = directory / (MANIFEST + ".tmp")
    tmp.write_text(manifest)
    tmp.replace(directory / MANIFEST)
    return summary

