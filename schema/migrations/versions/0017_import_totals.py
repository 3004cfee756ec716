"""import_totals, import_moves: each import's status counts, spend and progress chart, kept per import

The spend query, the /metrics snapshot and the overview page read a few rows per import here instead
of the import's tasks, runs and state events (docs/architecture.md, "Spend and waste").

- `import_totals`: per (tenant, import, shard), the tasks in each status (`n_<status>`), the
  approved videos and the spend figures of schema/spend.py. Many workers write the same import at
  once: a task always writes its own shard (`hashtext(task id) & 15`), so writers of different tasks
  rarely wait on one row, and a statement that touches several rows takes them sorted by key, import
  totals before import moves, so two writers never lock in opposite orders. Readers sum the shards.
- `import_moves`: per (tenant, import, minute, shard), the net change of each status count by the
  applied state moves of that minute: what the progress chart draws, without reading the events.

A task counts in the import that created it and in every import that reused it (`import_tasks`).
Statement triggers keep both tables in the writer's transaction, one aggregated write per statement
however many rows it changed (a row trigger would rewrite the same few rows once per row: quadratic
for a bulk statement). Each computes what the touched tasks add to their imports (`_task`: the rules
of schema/spend.py's recount) as the table it fires on stood before the statement and as it stands
after, and adds the difference; so the order in which a transaction changes a task, its ledger, its
events and its checks does not matter. It locks those tasks first (`_LOCK`), so concurrent writers
of one task take turns. `reelqueue ledger check` compares both tables with a recount (rule `import_totals_drift`).

Revision ID: 0017
Revises: 0016
"""

from collections.abc import Callable

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

# Frozen here as at this revision; tests/unit/test_import_totals_columns.py holds them equal to the code's.
STATUSES = ("CREATED", "VALIDATING", "INVALID", "QUOTA_RESERVED", "QUEUED", "DISPATCHING", "SUBMITTED",
            "SUBMIT_UNKNOWN", "RUNNING", "RETRY_WAIT", "OUTPUT_FETCHING", "POST_PROCESSING", "REVIEW",
            "CANCEL_REQUESTED", "NEEDS_ATTENTION", "SUCCEEDED", "CANCELED", "REJECTED", "FAILED_FINAL", "EXPIRED")
WASTED_BY_END = {"wasted_cancelled": ("CANCELED",), "wasted_failed": ("FAILED_FINAL", "EXPIRED"),
                 "wasted_rejected": ("REJECTED",)}  # schema/spend.py's WASTE_BY_END
MONEY = ("reserved", "settled", "released", "refunded", "adjusted", "duplicate")
SHARDS = 16
COUNTS = tuple(f"n_{s.lower()}" for s in STATUSES)
TOTALS = (*COUNTS, "approved", *MONEY, *WASTED_BY_END, "regenerated")
_AMOUNT = sa.Numeric(precision=20, scale=6)
_SHARD = f"hashtext({{task}}) & {SHARDS - 1}"


def _quoted(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{v}'" for v in values)


Rows = Callable[[str], str]  # given a query of task ids: a query of a table's rows of those tasks


def _rows(table: str, columns: str = "*") -> Rows:
    return lambda scope: f"SELECT {columns} FROM {table} WHERE task_id IN ({scope})"


def _task(tasks: str, runs: Rows = _rows("ledger_run_totals"), events: Rows = _rows("state_events"),
          checks: Rows = _rows("review_checks"), *, money: bool = True) -> str:
    """Per task of `tasks` (id, status, run_no): what it adds to each import covering it, from its
    runs' ledger totals, its applied state events and its automatic checks (each given as Rows, so a
    trigger can name a table as it stood before its statement). Set-based: a statement of one task
    costs a few index look-ups, a bulk statement a few joins. A run ends in the task's status when it
    is the current one, else in the status the n-th applied redrive left (the n-th redrive closes run
    n); a SUCCEEDED run's charges beyond its last review video paid for regenerated videos. Without
    `money` its runs add nothing (a task just created has none)."""
    scope = "SELECT id FROM k"
    approved = f"""SELECT e.task_id FROM ({events(scope)}) e WHERE e.event = 'review_approved' AND e.applied
                      AND e.task_id IN (SELECT c.task_id FROM ({checks(scope)}) c)"""
    columns = ", ".join([*(f"(k.status = '{s}')::int AS {c}" for s, c in zip(STATUSES, COUNTS, strict=True)),
                         f"(k.status = 'SUCCEEDED' AND k.id IN ({approved}))::int AS approved",
                         *(f"{f'coalesce(m.{c}, 0)' if money else '0'} AS {c}"
                           for c in (*MONEY, *WASTED_BY_END, "regenerated"))])
    if not money:
        return f"WITH k AS MATERIALIZED ({tasks}) SELECT k.id AS task_id, {columns} FROM k"
    own = "r.settled + r.adjusted - r.refunded - r.duplicate"
    wasted = ", ".join(f"sum({own}) FILTER (WHERE y.ended IN ({_quoted(ends)})) AS {column}"
                       for column, ends in WASTED_BY_END.items())
    return f"""
WITH k AS MATERIALIZED ({tasks}), ends AS (
  SELECT e.task_id, row_number() OVER (PARTITION BY e.task_id ORDER BY e.id) AS run_no, e.from_status AS ended
    FROM ({events(scope)}) e WHERE e.event = 'redrive' AND e.applied
), m AS (
  SELECT r.task_id, {", ".join(f"sum(r.{c}) AS {c}" for c in MONEY)}, {wasted},
         sum({own} - r.last_video) FILTER (WHERE y.ended = 'SUCCEEDED' AND r.last_video IS NOT NULL) AS regenerated
    FROM ({runs(scope)}) r JOIN k ON k.id = r.task_id
    LEFT JOIN ends x ON x.task_id = r.task_id AND x.run_no = r.run_no
   CROSS JOIN LATERAL (SELECT CASE WHEN r.run_no = k.run_no THEN k.status ELSE x.ended END AS ended) y
   GROUP BY r.task_id
)
SELECT k.id AS task_id, {columns} FROM k LEFT JOIN m ON m.task_id = k.id"""


def _negated(query: str) -> str:
    return f"SELECT task_id, {', '.join(f'-{c} AS {c}' for c in TOTALS)} FROM ({query}) n"


def _signed(sign: int, query: str) -> str:
    return query if sign > 0 else _negated(query)


def _linked(links: str) -> str:
    """The members of the import links in `links` (a relation of import_tasks rows)."""
    return f"SELECT l.task_id, t.tenant_id, l.import_id FROM {links} l JOIN tasks t ON t.id = l.task_id"


def _members(tasks: str) -> str:
    """(task_id, tenant_id, import_id) of every import covering the tasks whose ids `tasks` selects."""
    return f"""SELECT t.id AS task_id, t.tenant_id, t.import_id FROM tasks t WHERE t.id IN ({tasks})
               UNION ALL
               SELECT t.id, t.tenant_id, l.import_id FROM import_tasks l JOIN tasks t ON t.id = l.task_id
                WHERE l.task_id IN ({tasks})"""


def _add_totals(deltas: str, members: str) -> str:
    """Add `deltas` (task_id and every TOTALS column) to the shard rows of the imports in `members`."""
    sums = ", ".join(f"coalesce(sum(d.{c}), 0)" for c in TOTALS)
    adds = ", ".join(f"{c} = t.{c} + EXCLUDED.{c}" for c in TOTALS)
    return f"""
INSERT INTO import_totals AS t (tenant_id, import_id, shard, {", ".join(TOTALS)})
SELECT m.tenant_id, m.import_id, {_SHARD.format(task="m.task_id")}, {sums}
  FROM ({deltas}) d JOIN ({members}) m ON m.task_id = d.task_id
 GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
ON CONFLICT (tenant_id, import_id, shard) DO UPDATE SET {adds}"""


def _add_moves(events: str, members: str) -> str:
    """Add the applied moves of `events` (state event columns and a `sign`) to the imports' minutes."""
    nets = ", ".join(f"sum(e.sign * ((e.to_status = '{s}')::int - (e.from_status = '{s}')::int))"
                     for s in STATUSES)
    adds = ", ".join(f"{c} = t.{c} + EXCLUDED.{c}" for c in COUNTS)
    return f"""
INSERT INTO import_moves AS t (tenant_id, import_id, minute, shard, {", ".join(COUNTS)})
SELECT m.tenant_id, m.import_id, date_trunc('minute', e.created_at), {_SHARD.format(task="m.task_id")}, {nets}
  FROM ({events}) e JOIN ({members}) m ON m.task_id = e.task_id
 WHERE e.applied AND e.from_status <> e.to_status
 GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
ON CONFLICT (tenant_id, import_id, minute, shard) DO UPDATE SET {adds}"""


def _function(name: str, body: str) -> str:
    return (f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$\n"
            f"DECLARE nestloop text := current_setting('enable_nestloop');\nBEGIN\n{body}\nRETURN NULL;\nEND $$")


# A statement of a few rows (a transition, a ledger step) runs its queries as planned once per session:
# nested loops over the touched tasks' index entries. The planner cannot count a transition table's
# distinct tasks (it guesses 200), so for a bulk statement those cached plans would loop over a large
# spilled set once per row: past BULK rows the queries are planned afresh (EXECUTE) without nested loops.
BULK = 1000


def _branch(kind: str, rows: str, lock: str | None, statements: list[str]) -> str:
    """The body for one statement kind: lock the tasks, then run `statements` one way or the other."""
    small = "".join(f"{sql};\n" for sql in statements)
    bulk = "".join(f"EXECUTE $bulk${sql}$bulk$;\n" for sql in statements)
    return f"""IF TG_OP = '{kind}' THEN
{f"{lock};" if lock else ""}
IF (SELECT count(*) FROM {rows}) > {BULK} THEN
PERFORM set_config('enable_nestloop', 'off', true);
{bulk}PERFORM set_config('enable_nestloop', nestloop, true);
ELSE
{small}END IF;
END IF;"""


_EVENT = "id, task_id, event, applied, from_status, to_status, created_at"


def _changed(table: str, columns: str) -> dict[str, tuple[str, Rows]]:
    """Per statement kind: (the changed rows with a `sign`, the table's rows as they stood before it)."""
    new, old = f"SELECT {columns}, 1 AS sign FROM new_rows", f"SELECT {columns}, -1 AS sign FROM old_rows"

    def kept(scope: str) -> str:
        return (f"SELECT {columns} FROM {table} x WHERE x.task_id IN ({scope}) "
                "AND NOT EXISTS (SELECT 1 FROM new_rows n WHERE n.id = x.id)")

    def gone(scope: str) -> str:
        return f"SELECT {columns} FROM old_rows WHERE task_id IN ({scope})"

    return {"INSERT": (new, kept),
            "DELETE": (old, lambda scope: f"{_rows(table, columns)(scope)} UNION ALL {gone(scope)}"),
            "UPDATE": (f"{new} UNION ALL {old}", lambda scope: f"{kept(scope)} UNION ALL {gone(scope)}")}


# Before a trigger reads a task's other rows it locks the task, sorted by id: writers of one task (its
# transitions, its ledger, events, checks and links) then take turns, and each one's statement reads
# what the one before it committed (a new snapshot per statement). Without it two writers could each
# count their own change against the other's old state (a ledger row booked as the task ended).
_LOCK = "PERFORM 1 FROM tasks WHERE id IN ({tasks}) ORDER BY id FOR NO KEY UPDATE"


def _statement_body(table: str, columns: str, touched: str, relation: Callable[[Rows], dict[str, Rows]],
                    moves: bool = False) -> str:
    """A statement trigger's body on `table`: what the touched tasks add, with `relation` (the _task
    arguments this table feeds, given its rows) as the table stands now, minus as it stood before the
    statement; with `moves`, the changed rows' moves (state events) too."""
    parts = []
    for kind, (changed, before) in _changed(table, columns).items():
        lock = _LOCK.format(tasks=f"SELECT c.task_id FROM ({changed}) c")
        tasks = f"SELECT DISTINCT c.task_id FROM ({changed}) c WHERE {touched}"
        now = _task(f"SELECT id, status, run_no FROM tasks WHERE id IN ({tasks})", **relation(_rows(table, columns)))
        then = _task(f"SELECT id, status, run_no FROM tasks WHERE id IN ({tasks})", **relation(before))
        statements = [_add_totals(f"{now} UNION ALL {_negated(then)}", _members(tasks))]
        if moves:
            statements.append(_add_moves(changed, _members(f"SELECT DISTINCT task_id FROM ({changed}) c")))
        parts.append(_branch(kind, "new_rows" if kind != "DELETE" else "old_rows", lock, statements))
    return "\n".join(parts)


def _ledger_runs(ledger: str) -> str:
    """Per task run, the figures of `ledger_run_totals` summed from the ledger rows `ledger` selects
    (migration 0015's rules)."""
    kinds = {"reserved": "RESERVE", "settled": "SETTLE", "released": "RELEASE", "refunded": "REFUND",
             "adjusted": "ADJUSTMENT"}
    sums = ", ".join(f"coalesce(sum(c.amount) FILTER (WHERE c.entry_type = '{k}'), 0) AS {c}" for c, k in kinds.items())
    review = "c.entry_type = 'ADJUSTMENT' AND position(':review:' IN c.business_key) > 0"
    return f"""SELECT c.task_id, c.run_no, {sums},
       coalesce(sum(c.amount) FILTER (WHERE c.entry_type = 'ADJUSTMENT' AND c.provider_job_id IS NOT NULL), 0)
         AS duplicate,
       (array_agg(c.amount ORDER BY coalesce(c.attempt_no, 2147483647) DESC, c.id DESC) FILTER (WHERE {review}))[1]
         AS last_video
  FROM ({ledger}) c WHERE c.task_id IS NOT NULL GROUP BY c.task_id, c.run_no"""


_LEDGER = "id, task_id, run_no, entry_type, amount, business_key, attempt_no, provider_job_id"
_MOVED = """SELECT n.id FROM new_rows n JOIN old_rows o ON o.id = n.id
             WHERE n.status IS DISTINCT FROM o.status OR n.run_no IS DISTINCT FROM o.run_no"""
_FUNCTIONS = {
    # A new task counts in the import that created it (it has no ledger, event or check yet).
    "import_totals_tasks_added": _branch("INSERT", "new_rows", None, [_add_totals(
        _task("SELECT id, status, run_no FROM new_rows", money=False),
        "SELECT id AS task_id, tenant_id, import_id FROM new_rows")]),
    # A status or run change: each task as it was leaves its imports' totals, as it is enters. Every
    # update of a task fires this (a statement trigger has no column list): most change neither.
    "import_totals_tasks_moved": f"IF EXISTS ({_MOVED}) THEN\n" + _branch("UPDATE", "new_rows", None, [_add_totals(
        f"{_task(f'SELECT id, status, run_no FROM new_rows WHERE id IN ({_MOVED})')} UNION ALL "
        f"{_negated(_task(f'SELECT id, status, run_no FROM old_rows WHERE id IN ({_MOVED})'))}",
        _members(_MOVED))]) + "\nEND IF;",
    "import_totals_tasks_removed": _branch("DELETE", "old_rows", None, [_add_totals(
        _negated(_task("SELECT id, status, run_no FROM old_rows")),
        "SELECT id AS task_id, tenant_id, import_id FROM old_rows")]),
    # Ledger rows: their tasks' money, from the ledger rows as they are and as they were (read from the
    # ledger itself, not from ledger_run_totals, whose statement triggers may fire after these).
    "import_totals_ledger_changed": _statement_body(
        "credit_ledger", _LEDGER, "c.task_id IS NOT NULL",
        lambda rows: {"runs": lambda scope: _ledger_runs(rows(scope))}),
    # Redrives end runs and approvals count videos: the touched tasks then and now; every applied move
    # goes to the chart.
    "import_totals_events_changed": _statement_body(
        "state_events", _EVENT, "c.event IN ('redrive', 'review_approved') AND c.applied",
        lambda rows: {"events": rows}, moves=True),
    "import_totals_checks_changed": _statement_body("review_checks", "id, task_id", "true",
                                                    lambda rows: {"checks": rows}),
    # A reused task linked to an import (or unlinked): all it adds, and its whole history of moves.
    "import_totals_links_changed": "\n".join(
        _branch(kind, rows, _LOCK.format(tasks=f"SELECT task_id FROM {rows}"), [
            _add_totals(_signed(sign, _task(f"SELECT id, status, run_no FROM tasks WHERE id IN "
                                            f"(SELECT task_id FROM {rows})")), _linked(rows)),
            _add_moves(f"SELECT {_EVENT}, {sign} AS sign FROM state_events "
                       f"WHERE task_id IN (SELECT task_id FROM {rows})", _linked(rows))])
        for kind, rows, sign in (("INSERT", "new_rows", 1), ("DELETE", "old_rows", -1))),
}
_REFERENCING = {"INSERT": "NEW TABLE AS new_rows", "DELETE": "OLD TABLE AS old_rows",
                "UPDATE": "OLD TABLE AS old_rows NEW TABLE AS new_rows"}
# (trigger, table, event, function): every one AFTER the statement, with its rows as transition tables
# (one aggregated write per statement, however many rows it changed).
_TRIGGERS = (
    ("import_totals_tasks_insert", "tasks", "INSERT", "import_totals_tasks_added"),
    ("import_totals_tasks_update", "tasks", "UPDATE", "import_totals_tasks_moved"),
    ("import_totals_tasks_delete", "tasks", "DELETE", "import_totals_tasks_removed"),
    *((f"import_totals_{table}_{op.lower()}", table, op, function)
      for table, function in (("credit_ledger", "import_totals_ledger_changed"),
                              ("state_events", "import_totals_events_changed"),
                              ("review_checks", "import_totals_checks_changed"),
                              ("import_tasks", "import_totals_links_changed"))
      for op in _REFERENCING if not (table == "import_tasks" and op == "UPDATE")),
)
_LOCKED = ("tasks", "import_tasks", "credit_ledger", "ledger_run_totals", "state_events", "review_checks")
_EVERY_MEMBER = f"SELECT id AS task_id, tenant_id, import_id FROM tasks UNION ALL {_linked('import_tasks')}"


def upgrade() -> None:
    keys = [sa.Column("tenant_id", sa.String(64), primary_key=True),
            sa.Column("import_id", sa.String(40), primary_key=True)]
    counts = [sa.Column(c, sa.Integer, nullable=False, server_default="0") for c in COUNTS]
    op.create_table("import_totals", *keys, sa.Column("shard", sa.SmallInteger, primary_key=True), *counts,
                    sa.Column("approved", sa.Integer, nullable=False, server_default="0"),
                    *(sa.Column(c, _AMOUNT, nullable=False, server_default="0")
                      for c in (*MONEY, *WASTED_BY_END, "regenerated")))
    op.create_table("import_moves", *(sa.Column(c.name, c.type, primary_key=True) for c in keys),
                    sa.Column("minute", sa.DateTime(timezone=True), primary_key=True),
                    sa.Column("shard", sa.SmallInteger, primary_key=True),
                    *(sa.Column(c.name, c.type, nullable=False, server_default="0") for c in counts))
    op.create_index("ix_import_tasks_task", "import_tasks", ["task_id"])  # a task's imports, for the triggers
    bind = op.get_bind()
    bind.exec_driver_sql(f"LOCK TABLE {', '.join(_LOCKED)} IN SHARE MODE")  # no write between backfill and triggers
    for name, body in _FUNCTIONS.items():
        bind.exec_driver_sql(_function(name, body))
    for name, table, event, function in _TRIGGERS:
        bind.exec_driver_sql(f"CREATE TRIGGER {name} AFTER {event} ON {table} REFERENCING {_REFERENCING[event]} "
                             f"FOR EACH STATEMENT EXECUTE FUNCTION {function}()")
    bind.exec_driver_sql(_add_totals(_task("SELECT id, status, run_no FROM tasks"), _EVERY_MEMBER))
    bind.exec_driver_sql(_add_moves(f"SELECT {_EVENT}, 1 AS sign FROM state_events", _EVERY_MEMBER))


def downgrade() -> None:
    for name, table, *_ in _TRIGGERS:
        op.execute(f"DROP TRIGGER {name} ON {table}")
    for name in _FUNCTIONS:
        op.execute(f"DROP FUNCTION {name}()")
    op.drop_index("ix_import_tasks_task", "import_tasks")
    op.drop_table("import_moves")
    op.drop_table("import_totals")
