"""Per-import totals (migration 0017): each import's status counts, spend figures and progress-chart
moves, kept by triggers in the writers' transactions, so a read costs a few rows per import however
many tasks, ledger rows and state events the import has.

`import_totals` holds SHARDS rows per import (a task always writes the same one, so concurrent
writers of one import rarely wait on each other); readers sum them. `import_moves` holds, per minute
(and shard), the net change of each status count. Every read names the tenant of the import
(`catalog_imports.tenant_id`), the first column of both keys. `drift` compares them with a recount
from the tasks, the ledger's run totals and the state events: `reelqueue ledger check`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy import TextClause, bindparam, text
from sqlalchemy.orm import Session

from contracts.task import TaskStatus

SHARDS = 16
COUNT_OF: dict[str, str] = {s.value: f"n_{s.value.lower()}" for s in TaskStatus}  # status -> its column
_ANY = ", ".join(f"sum(t.{c})::int AS {c}" for c in COUNT_OF.values())
# The spend query's figures (schema/spend.py FIGURES) from the import's shard rows.
_FIGURES = ("sum(t.reserved) AS reserved, sum(t.settled) AS settled, sum(t.released) AS released, "
            "sum(t.refunded) AS refunded, sum(t.adjusted) AS adjusted, sum(t.duplicate) AS duplicate, "
            "sum(t.wasted_cancelled) AS cancelled, sum(t.wasted_failed) AS failed, "
            "sum(t.wasted_rejected) AS rejected, sum(t.regenerated) AS regenerated, "
            "sum(t.n_succeeded) AS succeeded, sum(t.approved) AS approved")


def totals_sql(wanted: str) -> str:
    """Per import that `wanted` selects (a query with one column, `id`): its spend figures and status
    counts, summed over its shard rows (an import nothing was counted for yet: NULLs)."""
    return f"""
SELECT i.id AS import_id, {_FIGURES}, {_ANY}
  FROM catalog_imports i LEFT JOIN import_totals t ON t.tenant_id = i.tenant_id AND t.import_id = i.id
 WHERE i.id IN ({wanted})
 GROUP BY i.id"""


TOTALS_OF: TextClause = text(totals_sql("SELECT id FROM catalog_imports WHERE id IN :ids")).bindparams(
    bindparam("ids", expanding=True))


def counts_from_row(row) -> dict[str, int]:  # noqa: ANN001 - a mapping of totals_sql's columns
    """{status: tasks} of the statuses that have any."""
    return {status: row[column] for status, column in COUNT_OF.items() if row[column]}


def status_counts(session: Session, import_id: str) -> dict[str, int]:
    """The import's tasks by status, as `queries.status_counts` counts them."""
    row = session.execute(TOTALS_OF, {"ids": [import_id]}).mappings().first()
    return counts_from_row(row) if row else {}


# The chart: per bucket of the import's time, the net change of each status count. A minute's moves
# fall in the bucket of its middle (the events themselves are not read).
_NETS = ", ".join(f"sum(m.{c})::int" for c in COUNT_OF.values())
MOVES = text(f"""
SELECT least(greatest(width_bucket(extract(epoch FROM m.minute) + 30, :lo, :hi, :n), 1), :n) AS bucket, {_NETS}
  FROM import_moves m JOIN catalog_imports i ON i.tenant_id = m.tenant_id AND i.id = m.import_id
 WHERE i.id = :imp
 GROUP BY 1""")
LAST_MINUTE = text("""
SELECT max(m.minute) FROM import_moves m JOIN catalog_imports i ON i.tenant_id = m.tenant_id AND i.id = m.import_id
 WHERE i.id = :imp""")


def moves(session: Session, import_id: str, lo: float, hi: float, buckets: int) -> dict[int, dict[str, int]]:
    """{bucket: {status: net change}} over `buckets` equal slices of [lo, hi] (epoch seconds)."""
    out: dict[int, dict[str, int]] = {}
    for bucket, *nets in session.execute(MOVES, {"imp": import_id, "lo": lo, "hi": hi, "n": buckets}):
        out[bucket] = {status: n for status, n in zip(COUNT_OF, nets, strict=True) if n}
    return out


def last_move(session: Session, import_id: str) -> datetime | None:
    """The end of the last minute in which a task of the import moved (None: none moved yet)."""
    minute = session.scalar(LAST_MINUTE, {"imp": import_id})
    return None if minute is None else minute + timedelta(minutes=1)


def import_ids(session: Session, import_id: str | None) -> Sequence[str]:
    """The import, or every import."""
    if import_id is not None:
        return [import_id]
    return list(session.scalars(text("SELECT id FROM catalog_imports ORDER BY id")))
