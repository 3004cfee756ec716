"""Bulk writes of expanded tasks with COPY: the import's hot path for large catalogs.

Rows are COPYed into a temporary staging table, then moved with one INSERT ... ON CONFLICT DO
NOTHING, which also records which tasks were new and which were reused by this import.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg.types.json import Jsonb
from sqlalchemy.orm import Session

TASK_COLUMNS = (
    "id", "tenant_id", "identity", "import_id", "plan_id", "product_ref", "product_id", "template_id",
    "template_version", "locale", "aspect_ratio", "variant", "prompt", "overlay", "prompt_sha256",
    "image_sha256", "image_asset_id", "duration_s", "provider", "model", "estimated_cost", "status", "version",
    "progress", "current_attempt_no", "workflow_id",
)
_JSON = {"identity", "overlay"}
_COLS = ", ".join(TASK_COLUMNS)


def _raw(session: Session):  # noqa: ANN202 - psycopg.Connection
    return session.connection().connection.driver_connection


def prepare_staging(session: Session) -> None:
    """A per-transaction staging table shaped like `tasks` (dropped at commit)."""
    session.connection().exec_driver_sql(
        "CREATE TEMP TABLE IF NOT EXISTS staged_tasks (LIKE tasks INCLUDING DEFAULTS) ON COMMIT DROP"
    )


def insert_tasks(session: Session, import_id: str, rows: Sequence[dict[str, Any]]) -> int:
    """Insert task rows (new ones) and link all of them to the import; returns how many were new."""
    conn = _raw(session)
    with conn.cursor() as cur:
        cur.execute("TRUNCATE staged_tasks")
        with cur.copy(f"COPY staged_tasks ({_COLS}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row([Jsonb(row[c]) if c in _JSON else row[c] for c in TASK_COLUMNS])
        cur.execute(
            f"""
            WITH new AS (
                INSERT INTO tasks ({_COLS}) SELECT {_COLS} FROM staged_tasks
                ON CONFLICT (id) DO NOTHING RETURNING id
            )
            INSERT INTO import_tasks (import_id, task_id, reused)
            SELECT %s, s.id, new.id IS NULL FROM staged_tasks s LEFT JOIN new ON new.id = s.id
            ON CONFLICT DO NOTHING
            RETURNING reused
            """,
            (import_id,),
        )
        return sum(1 for (reused,) in cur.fetchall() if not reused)
