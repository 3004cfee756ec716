"""Bulk writes of an import with COPY: the import's hot path for large catalogs.

Products are COPYed with ids taken from their sequence up front (one query per batch), so tasks
can name their product without a RETURNING round trip. Tasks that already exist (a re-import of
the catalog that makes some of the same tasks) are looked up by id, the others COPYed straight
into `tasks` (COPY inserts in bulk; an INSERT .. SELECT .. ON CONFLICT from a staging table
inserted row by row and wrote every row twice); a task that existed is linked to the import as
reused (`import_tasks`), a new one names its import in `tasks.import_id`. Task rows arrive as COPY
text lines formatted by the caller (JSON columns as JSON text, which the server parses).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

# COPY's column order for tasks: the product's id first (known only when the writer has taken it
# from the sequence), then what differs per task, per product, per combination, per import; the
# caller formats each task's line after `product_ref` (`copy_text` for every text value).
TASK_COLUMNS = (
    "product_ref", "id", "identity", "workflow_id", "prompt", "prompt_sha256", "overlay",
    "product_id", "image_sha256", "image_asset_id",
    "template_id", "template_version", "locale", "aspect_ratio", "variant", "duration_s", "provider", "model",
    "estimated_cost",
    "tenant_id", "import_id", "plan_id", "status", "version", "progress", "current_attempt_no",
)
PRODUCT_COLUMNS = (
    "id", "import_id", "tenant_id", "plan_id", "product_id", "title", "description", "image_url", "image_asset_id",
    "price", "currency", "category", "data", "content_sha256",
)
_COLS = ", ".join(TASK_COLUMNS)


def _raw(session: Session):  # noqa: ANN202 - psycopg.Connection
    return session.connection().connection.driver_connection


def lock_catalog(session: Session, tenant: str, catalog: str) -> None:
    """One import of a catalog at a time (transaction-scoped): task ids hash the tenant and the
    catalog, so only another import of the same catalog could write the same tasks meanwhile, and
    its version number is read from the previous import."""
    session.connection().exec_driver_sql("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                                         (f"import:{tenant}:{catalog}",))


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


_ESCAPES = {ord("\\"): "\\\\", ord("\t"): "\\t", ord("\n"): "\\n", ord("\r"): "\\r"}


def copy_text(value: object) -> str:
    """One value in COPY's text format: NULL as \\N, backslash, tab, newline and CR escaped."""
    if value is None:
        return "\\N"
    text = str(value)
    if "\\" in text or "\t" in text or "\n" in text or "\r" in text:
        return text.translate(_ESCAPES)
    return text


def insert_tasks(session: Session, import_id: str, tasks: Sequence[tuple[str, str]], *, may_exist: bool) -> int:
    """COPY the tasks (id, line: the COPY text of its TASK_COLUMNS, newline included) that do not
    exist yet (their `import_id` says this import created them), and link those that existed to the
    import as reused (`import_tasks`, see schema.import_scope); returns how many were new.

    Needs `lock_catalog` held: nobody else writes these ids between the look-up and the COPY.
    `may_exist` False (no earlier import of this tenant's catalog) skips the look-up: task ids hash
    the tenant and the catalog, so only an import of the same catalog can have made them."""
    with _raw(session).cursor() as cur:
        existing: set[str] = set()
        if may_exist:
            cur.execute("SELECT id FROM tasks WHERE id = ANY(%s)", ([task_id for task_id, _ in tasks],))
            existing = {task_id for (task_id,) in cur.fetchall()}
        with cur.copy(f"COPY tasks ({_COLS}) FROM STDIN") as copy:
            copy.write("".join(line for task_id, line in tasks if task_id not in existing))
        if existing:
            with cur.copy("COPY import_tasks (import_id, task_id, reused) FROM STDIN") as copy:
                for task_id in existing:
                    copy.write_row((import_id, task_id, True))
    return len(tasks) - len(existing)
