"""Bulk writes of an import with COPY: the import's hot path for large catalogs.

Products are COPYed with ids taken from their sequence up front (one query per batch), so tasks
can name their product without a RETURNING round trip. Tasks are COPYed into a temporary staging
table, then moved with one INSERT ... ON CONFLICT DO NOTHING, which also records which tasks were
new and which were reused by this import. JSON columns arrive as JSON text (COPY's text format:
the server parses them), encoded once by the caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

TASK_COLUMNS = (
    "id", "tenant_id", "identity", "import_id", "plan_id", "product_ref", "product_id", "template_id",
    "template_version", "locale", "aspect_ratio", "variant", "prompt", "overlay", "prompt_sha256",
    "image_sha256", "image_asset_id", "duration_s", "provider", "model", "estimated_cost", "status", "version",
    "progress", "current_attempt_no", "workflow_id",
)
PRODUCT_COLUMNS = (
    "id", "import_id", "product_id", "title", "description", "image_url", "image_asset_id", "price", "currency",
    "category", "data", "content_sha256",
)
_COLS = ", ".join(TASK_COLUMNS)


def _raw(session: Session):  # noqa: ANN202 - psycopg.Connection
    return session.connection().connection.driver_connection


def prepare_staging(session: Session) -> None:
    """A per-transaction staging table shaped like `tasks` (dropped at commit)."""
    session.connection().exec_driver_sql(
        "CREATE TEMP TABLE IF NOT EXISTS staged_tasks (LIKE tasks INCLUDING DEFAULTS) ON COMMIT DROP"
    )


def insert_products(session: Session, rows: Sequence[Sequence[Any]]) -> list[int]:
    """COPY product rows (PRODUCT_COLUMNS without `id`); returns their new ids, in order."""
    with _raw(session).cursor() as cur:
        cur.execute("SELECT nextval(pg_get_serial_sequence('products', 'id')) FROM generate_series(1, %s)",
                    (len(rows),))
        ids = [i for (i,) in cur.fetchall()]
        with cur.copy(f"COPY products ({', '.join(PRODUCT_COLUMNS)}) FROM STDIN") as copy:
            for product_id, row in zip(ids, rows, strict=True):
                copy.write_row((product_id, *row))
    return ids


def insert_tasks(session: Session, import_id: str, rows: Sequence[Sequence[Any]]) -> int:
    """Insert task rows (values in TASK_COLUMNS order; new ones only) and link all of them to the
    import; returns how many were new."""
    with _raw(session).cursor() as cur:
        cur.execute("TRUNCATE staged_tasks")
        with cur.copy(f"COPY staged_tasks ({_COLS}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
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
