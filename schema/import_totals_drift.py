"""Where an import's running totals (schema/import_totals.py) differ from a recount: the spend query
over its task runs (schema/spend.py `spend_sql`), its tasks by status and its applied state moves per
minute. The recount reads everything the totals spare the other readers; `reelqueue ledger check`
runs it (rule `import_totals_drift`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal

from sqlalchemy import bindparam, text
from sqlalchemy.orm import Session

from schema.import_totals import COUNT_OF, totals_sql
from schema.spend import FIGURES, NO_JIT, spend_sql

_WANTED = "SELECT id FROM catalog_imports WHERE id IN :ids"
_SCOPE = """SELECT t.import_id, t.id, t.status FROM tasks t WHERE t.import_id IN :ids
            UNION ALL
            SELECT l.import_id, t.id, t.status FROM import_tasks l JOIN tasks t ON t.id = l.task_id
             WHERE l.import_id IN :ids"""
_RECOUNTS = {
    "spend": spend_sql(_WANTED),
    "totals": totals_sql(_WANTED),
    "counts": f"SELECT s.import_id, s.status, count(*)::int FROM ({_SCOPE}) s GROUP BY 1, 2",
    "moves": f"""
SELECT s.import_id, date_trunc('minute', e.created_at), m.status, sum(m.delta)::int
  FROM ({_SCOPE}) s JOIN state_events e ON e.task_id = s.id
 CROSS JOIN LATERAL (VALUES (e.from_status, -1), (e.to_status, 1)) AS m(status, delta)
 WHERE e.applied AND e.from_status <> e.to_status
 GROUP BY 1, 2, 3""",
    "kept": f"""
SELECT m.import_id, m.minute, {", ".join(f"sum(m.{c})::int" for c in COUNT_OF.values())}
  FROM import_moves m JOIN catalog_imports i ON i.tenant_id = m.tenant_id AND i.id = m.import_id
 WHERE i.id IN :ids GROUP BY 1, 2""",
}
_QUERIES = {name: text(sql).bindparams(bindparam("ids", expanding=True)) for name, sql in _RECOUNTS.items()}

Moves = dict[tuple[datetime, str], int]  # (minute, status) -> net change, zeros left out


def drift(session: Session, import_ids: Sequence[str]) -> dict[str, list[str]]:
    """Per import of `import_ids` whose totals differ from the recount: what differs."""
    if not import_ids:
        return {}
    session.execute(NO_JIT)
    run = {name: session.execute(q, {"ids": list(import_ids)}) for name, q in _QUERIES.items()}
    found: dict[str, list[str]] = defaultdict(list)
    recount = {row["import_id"]: row for row in run["spend"].mappings()}
    counts: dict[str, dict[str, int]] = defaultdict(dict)
    for imp, status, n in run["counts"]:
        counts[imp][status] = n
    for row in run["totals"].mappings():
        imp = row["import_id"]
        for figure in FIGURES:
            kept, counted = Decimal(row[figure] or 0), Decimal(recount[imp][figure] or 0)
            if kept != counted:
                found[imp].append(f"{figure}: kept {kept}, recounted {counted}")
        kept_counts = {s: row[c] for s, c in COUNT_OF.items() if row[c]}
        if kept_counts != counts.get(imp, {}):
            found[imp].append(f"tasks by status: kept {kept_counts}, recounted {counts.get(imp, {})}")
    kept_moves, counted_moves = _moves(run["kept"]), _event_moves(run["moves"])
    for imp in set(kept_moves) | set(counted_moves):
        kept, counted = kept_moves.get(imp, {}), counted_moves.get(imp, {})
        minutes = {minute for minute, status in kept.keys() | counted.keys()
                   if kept.get((minute, status)) != counted.get((minute, status))}
        if minutes:
            found[imp].append(f"state moves differ in {len(minutes)} minute(s), first {min(minutes):%Y-%m-%d %H:%M}")
    return dict(found)


def _moves(rows) -> dict[str, Moves]:  # noqa: ANN001 - (import, minute, net per status...) rows
    out: dict[str, Moves] = defaultdict(dict)
    for imp, minute, *nets in rows:
        out[imp].update({(minute, s): n for s, n in zip(COUNT_OF, nets, strict=True) if n})
    return out


def _event_moves(rows) -> dict[str, Moves]:  # noqa: ANN001 - (import, minute, status, net) rows
    out: dict[str, Moves] = defaultdict(dict)
    for imp, minute, status, n in rows:
        if n:
            out[imp][(minute, status)] = n
    return out
