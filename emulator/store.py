"""Jobs in a sqlite file, so they survive an emulator restart (stdlib only); the table is the queue.

Status changes are compare-and-set (`only_from`): a cancel racing a finishing job leaves exactly
one winner, and a terminal job never moves again. A running job carries its timer (`started_at`,
`job_s`) and its render state (NULL: to render, `rendering`, `done`), under the owner token of the
process that started it. Jobs a dead process left running are started again by the next one,
still showing `running` to clients (no step back to `queued`). Hence one emulator process per
data directory.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    request_key TEXT NOT NULL,
    model TEXT NOT NULL,
    prompt TEXT NOT NULL,
    image_url TEXT,
    aspect_ratio TEXT NOT NULL,
    duration_s REAL NOT NULL,
    overlay_lines TEXT NOT NULL,
    webhook_url TEXT,
    status TEXT NOT NULL,
    progress REAL NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    fail_injected INTEGER NOT NULL DEFAULT 0,
    renders INTEGER NOT NULL DEFAULT 0,
    owner TEXT,
    error_code TEXT,
    error_message TEXT,
    cost REAL,
    started_at REAL,
    job_s REAL,
    render_state TEXT,
    defect TEXT
);
CREATE INDEX IF NOT EXISTS jobs_request_key ON jobs (request_key);
CREATE INDEX IF NOT EXISTS jobs_status_created ON jobs (status, created_at);
"""
# Columns added since the first release: data dirs made before get them on open.
_ADDED_COLUMNS = {"started_at": "REAL", "job_s": "REAL", "render_state": "TEXT", "defect": "TEXT"}


class JobRecord(BaseModel):
    id: str
    request_key: str
    model: str
    prompt: str
    image_url: str | None
    aspect_ratio: str
    duration_s: float
    overlay_lines: list[str]
    webhook_url: str | None
    status: str
    progress: float = 0.0
    created_at: float
    updated_at: float
    fail_injected: bool = False
    renders: int = 0
    error_code: str | None = None
    error_message: str | None = None
    cost: float | None = None
    started_at: float | None = None
    job_s: float | None = None
    render_state: str | None = None
    defect: str | None = None  # "black" / "frozen" (emulator/render.py)


class JobStore:
    """One connection behind a lock: the app's request threads and the render threads share it."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._owner = uuid.uuid4().hex
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)
        self._add_missing_columns()

    @property
    def owner(self) -> str:
        """This process's token on the jobs it runs."""
        return self._owner

    def _add_missing_columns(self) -> None:
        have = {row["name"] for row in self._db.execute("PRAGMA table_info(jobs)")}
        for name, kind in _ADDED_COLUMNS.items():
            if name not in have:
                self._db.execute(f"ALTER TABLE jobs ADD COLUMN {name} {kind}")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _query(self, sql: str, args: Iterable[Any] = ()) -> list[JobRecord]:
        with self._lock:
            rows = self._db.execute(sql, tuple(args)).fetchall()
        return [_record(row) for row in rows]

    def insert(self, job: JobRecord) -> None:
        row = job.model_dump()
        row["overlay_lines"] = json.dumps(job.overlay_lines)
        cols = ", ".join(row)
        marks = ", ".join(f":{c}" for c in row)
        with self._lock:
            self._db.execute(f"INSERT INTO jobs ({cols}) VALUES ({marks})", row)

    def get(self, job_id: str) -> JobRecord | None:
        found = self._query("SELECT * FROM jobs WHERE id = ?", (job_id,))
        return found[0] if found else None

    def list(self, request_key: str | None = None) -> list[JobRecord]:
        if request_key is None:
            return self._query("SELECT * FROM jobs ORDER BY created_at, id")
        return self._query("SELECT * FROM jobs WHERE request_key = ? ORDER BY created_at, id", (request_key,))

    def created_since(self, since: float, *, offset: int, limit: int, other_prefixes: Sequence[str] = ()
                      ) -> list[JobRecord]:
        """A page of the jobs created at or after `since` (epoch seconds), oldest first, without those
        whose request key starts with one of `other_prefixes` (the dialects' jobs)."""
        others = "".join(" AND request_key NOT LIKE ? ESCAPE '\\'" for _ in other_prefixes)
        return self._query(f"SELECT * FROM jobs WHERE created_at >= ?{others} ORDER BY created_at, id LIMIT ? OFFSET ?",
                           (since, *(_like_prefix(p) for p in other_prefixes), limit, offset))

    def list_prefix(self, prefix: str) -> list[JobRecord]:
        """Jobs whose request key starts with `prefix` (a dialect's jobs), oldest first."""
        return self._query("SELECT * FROM jobs WHERE request_key LIKE ? ESCAPE '\\' ORDER BY created_at, id",
                           (_like_prefix(prefix),))

    def count(self, *statuses: str) -> int:
        sql = f"SELECT count(*) FROM jobs WHERE status IN ({_marks(statuses)})"
        with self._lock:
            return self._db.execute(sql, statuses).fetchone()[0]

    def oldest(self, statuses: Iterable[str], limit: int | None = None) -> list[JobRecord]:
        """The `limit` (default: all) oldest jobs in `statuses`: the queue order."""
        sources = list(statuses)
        sql = f"SELECT * FROM jobs WHERE status IN ({_marks(sources)}) ORDER BY created_at, id LIMIT ?"
        return self._query(sql, (*sources, -1 if limit is None else limit))

    def orphans(self) -> list[JobRecord]:
        """Running jobs of another (dead) process."""
        return self._query("SELECT * FROM jobs WHERE status = 'running' AND owner IS NOT ?", (self._owner,))

    def due(self, now: float) -> list[JobRecord]:
        """Our running jobs whose render is done and whose job time has passed."""
        return self._query(
            "SELECT * FROM jobs WHERE status = 'running' AND owner = ? AND render_state = 'done' "
            "AND started_at + job_s <= ? ORDER BY started_at",
            (self._owner, now),
        )

    def transition(
        self, job_id: str, to: str, *, only_from: Iterable[str], **fields: Any
    ) -> JobRecord | None:
        """Set status (and fields) if the job is in one of `only_from`; the new record, else None."""
        sources = list(only_from)
        values = {"status": to, "updated_at": time.time(), **fields}
        sets = ", ".join(f"{k} = ?" for k in values)
        with self._lock:
            changed = self._db.execute(
                f"UPDATE jobs SET {sets} WHERE id = ? AND status IN ({_marks(sources)})",
                (*values.values(), job_id, *sources),
            ).rowcount
        return self.get(job_id) if changed else None

    def claim_render(self) -> JobRecord | None:
        """Our longest-running job not yet rendered, marked `rendering` (and counted), or None."""
        with self._lock:
            row = self._db.execute(
                "UPDATE jobs SET render_state = 'rendering', renders = renders + 1 WHERE id = ("
                "SELECT id FROM jobs WHERE status = 'running' AND owner = ? AND render_state IS NULL "
                "ORDER BY started_at, created_at LIMIT 1) RETURNING *",
                (self._owner,),
            ).fetchone()
        return _record(row) if row else None

    def render_done(self, job_id: str, error_code: str | None = None, error_message: str | None = None) -> bool:
        """Record a finished render (with its failure, if any); False if the job moved on meanwhile."""
        with self._lock:
            return bool(
                self._db.execute(
                    "UPDATE jobs SET render_state = 'done', error_code = ?, error_message = ? "
                    "WHERE id = ? AND status = 'running' AND owner = ? AND render_state = 'rendering'",
                    (error_code, error_message, job_id, self._owner),
                ).rowcount
            )


def _like_prefix(prefix: str) -> str:
    """A LIKE pattern (escape character backslash) matching the strings that start with `prefix`."""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _marks(values: Sequence[object]) -> str:
    """SQL placeholders for an IN list."""
    return ", ".join("?" for _ in values)


def _record(row: sqlite3.Row) -> JobRecord:
    data = dict(row)
    data["overlay_lines"] = json.loads(data["overlay_lines"])
    return JobRecord(**data)
