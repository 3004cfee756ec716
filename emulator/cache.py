"""Render cache: a clip is rendered once per distinct input, later identical jobs get a link.

The key hashes everything that shapes the clip (image bytes, ratio, duration, overlay lines,
render mode, and RENDER_VERSION for the code itself). Entries live in DATA_DIR/cache, at most
`max_entries` of them: storing one more drops the least recently used.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import uuid
from pathlib import Path

log = logging.getLogger("emulator.cache")
# Bump when render.py changes what a clip looks like: old entries then miss.
RENDER_VERSION = 1
_CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def clip_key(
    *, image_sha256: str | None, aspect_ratio: str, duration_s: float, overlay_lines: list[str], mode: str,
    defect: str | None = None,
) -> str:
    """A stable hex key for the clip these inputs render to."""
    spec = {
        "version": RENDER_VERSION,
        "image_sha256": image_sha256,
        "aspect_ratio": aspect_ratio,
        "duration_s": float(duration_s),
        "overlay_lines": overlay_lines,
        "mode": mode,
    }
    if defect:  # absent otherwise, so clips cached before defects existed keep their keys
        spec["defect"] = defect
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def place(src: Path, dst: Path) -> None:
    """Make `dst` a hard link to `src` (a copy where links fail), replacing `dst` atomically."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.{uuid.uuid4().hex}.tmp")
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


class RenderCache:
    def __init__(self, root: Path, max_entries: int):
        self._root = root
        self._max = max_entries

    def _path(self, key: str) -> Path:
        return self._root / f"{key}.mp4"

    def fetch(self, key: str, dst: Path) -> bool:
        """Place the cached clip at `dst`; False on a miss (or with the cache off)."""
        if self._max <= 0:
            return False
        cached = self._path(key)
        try:
            place(cached, dst)
            os.utime(cached)  # recently used: evicted last
        except FileNotFoundError:
            return False
        return True

    def store(self, key: str, src: Path) -> None:
        """Keep `src` as the clip for `key`; a failure only costs a later render."""
        if self._max <= 0:
            return
        try:
            place(src, self._path(key))
            self._evict()
        except OSError as exc:
            log.warning("render cache: cannot store %s: %s", key, exc)

    def _evict(self) -> None:
        entries = sorted(self._root.glob("*.mp4"), key=_mtime, reverse=True)
        for stale in entries[self._max :]:
            stale.unlink(missing_ok=True)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:  # evicted by another render thread meanwhile
        return 0.0
