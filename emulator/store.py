"""Jobs in a sqlite file, so they survive an emulator restart (stdlib only).

Status changes are compare-and-set (`only_from`): a cancel racing a finishing render leaves
exactly one winner, and a terminal job never moves again. Each store instance (process) claims
jobs under its own owner token, so jobs a dead process left running are claimed again and
re-rendered, still showing `running` to clients (no step back to `queued`). Hence one
emulator process per data directory.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterable
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
    cost REAL
);
CREATE INDEX IF NOT EXISTS jobs_request_key ON jobs (request_key);
CREATE INDEX IF NOT EXISTS jobs_status_created ON jobs (status, created_at);
"""


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

    def count(self, status: str) -> int:
        with self._lock:
            return self._db.execute("SELECT count(*) FROM jobs WHERE status = ?", (status,)).fetchone()[0]

    def transition(
        self, job_id: str, to: str, *, only_from: Iterable[str], **fields: Any
    ) -> JobRecord | None:
        """Set status (and fields) if the job is in one of `only_from`; the new record, else None."""
        sources = list(only_from)
        values = {"status": to, "updated_at": time.time(), **fields}
        sets = ", ".join(f"{k} = ?" for k in values)
        marks = ", ".join("?" for _ in sources)
        with self._lock:
            changed = self._db.execute(
                f"UPDATE jobs SET {sets} WHERE id = ? AND status IN ({marks})",
                (*values.values(), job_id, *sources),
            ).rowcount
        return self.get(job_id) if changed else None

    def claim_next(self) -> tuple[JobRecord, str] | None:
        """Oldest job to render -> running under this owner: (job, status before), or None.

        Candidates are queued jobs and running jobs of another (dead) owner.
        """
        with self._lock:
            found = self._db.execute(
                "SELECT id, status FROM jobs WHERE status = 'queued' "
                "OR (status = 'running' AND owner IS NOT ?) ORDER BY created_at, id LIMIT 1",
                (self._owner,),
            ).fetchone()
            if found is None:
                return None
            row = self._db.execute(
                "UPDATE jobs SET status = 'running', progress = 0, renders = renders + 1, owner = ?, "
                "updated_at = ? WHERE id = ? RETURNING *",
                (self._owner, time.time(), found["id"]),
            ).fetchone()
        return _record(row), found["status"]

    def set_progress(self, job_id: str, progress: float) -> bool:
        """Record progress of a running job; False once it is no longer running (canceled)."""
        with self._lock:
            return bool(
                self._db.execute(
                    "UPDATE jobs SET progress = ? WHERE id = ? AND status = 'running'", (progress, job_id)
                ).rowcount
            )


def _record(row: sqlite3.Row) -> JobRecord:
    data = dict(row)
    data["overlay_lines"] = json.loads(data["overlay_lines"])
    return JobRecord(**data)
