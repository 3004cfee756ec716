"""duplicate waste: only a stray job's ADJUSTMENT, not the backstop's correction of an attempt's own job

Migrations 0015 and 0017 counted every ADJUSTMENT carrying a job id as a duplicate job. The provider
backstop books its corrections of an attempt's own job with the job id too (`adjustment:{task}:
backstop:{job}`, `...:webhook:{job}`: the provider charged that job more than the ledger held), so a
SUCCEEDED task re-rated by its provider showed the difference as duplicate waste. A duplicate is now
what schema/strays.py books: key `adjustment:{task}:job:{job}`. The ledger triggers of 0015 and the
import totals' ledger trigger of 0017 are replaced with that rule, the runs' `duplicate` recounted and
the imports of the tasks concerned given the difference, all under a share lock of the tables read.

Revision ID: 0020
Revises: 0019
"""

import importlib.util
from pathlib import Path
from types import ModuleType

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

OLD = "{row}.entry_type = 'ADJUSTMENT' AND {row}.provider_job_id IS NOT NULL"
# Frozen here as at this revision; tests/unit/test_import_totals_columns.py holds it equal to the code's.
STRAY_ADJUSTMENT = ("{row}.entry_type = 'ADJUSTMENT' AND {row}.provider_job_id IS NOT NULL "
                    "AND {row}.business_key = 'adjustment:' || {row}.task_id || ':job:' || {row}.provider_job_id")
_LOCKED = ("tasks", "import_tasks", "credit_ledger", "ledger_run_totals", "state_events", "review_checks")


def _revision(name: str) -> ModuleType:
    """An earlier migration of this folder, whose trigger bodies this one rewrites."""
    spec = importlib.util.spec_from_file_location(f"migration_{name[:4]}", Path(__file__).with_name(name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ruled(sql: str, old: str, new: str) -> str:
    """`sql` with each ledger row alias's duplicate rule `old` replaced by `new` (every one present)."""
    found = False
    for row in ("NEW", "c"):
        if old.format(row=row) in sql:
            sql, found = sql.replace(old.format(row=row), new.format(row=row)), True
    assert found, "no duplicate rule to replace"
    return sql.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")


def _ledger_function(m17: ModuleType, rule: str) -> str:
    """0017's `import_totals_ledger_changed` with `rule` as its duplicate rule."""
    body = m17._statement_body("credit_ledger", m17._LEDGER, "c.task_id IS NOT NULL",
                               lambda rows: {"runs": lambda scope: _ledger_runs(m17, rule, rows(scope))})
    return m17._function("import_totals_ledger_changed", body).replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")


def _ledger_runs(m17: ModuleType, rule: str, ledger: str) -> str:
    runs = m17._ledger_runs(ledger)
    return runs if rule == OLD else _ruled(runs, OLD, rule)


def _switch(old: str, new: str) -> None:
    """Triggers counting by `new` instead of `old`; every run and import recounted accordingly."""
    m15, m17 = _revision("0015_ledger_run_totals.py"), _revision("0017_import_totals.py")
    bind = op.get_bind()
    bind.exec_driver_sql(f"LOCK TABLE {', '.join(_LOCKED)} IN SHARE MODE")  # no write while recounting
    for function in (m15._ADD, m15._RECOUNT):
        bind.exec_driver_sql(_ruled(function, OLD, new) if new != OLD else
                             function.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"))
    bind.exec_driver_sql(_ledger_function(m17, new))
    # the tasks whose figures differ: those with an ADJUSTMENT one rule counts and the other does not
    differs = f"({OLD.format(row='c')}) IS DISTINCT FROM ({STRAY_ADJUSTMENT.format(row='c')})"
    tasks = f"SELECT DISTINCT c.task_id FROM credit_ledger c WHERE c.task_id IS NOT NULL AND {differs}"

    def ledger_of(scope: str) -> str:
        return f"SELECT {m17._LEDGER} FROM credit_ledger WHERE task_id IN ({scope})"

    def figures(rule: str) -> str:
        return m17._task(f"SELECT id, status, run_no FROM tasks WHERE id IN ({tasks})",
                         runs=lambda scope: _ledger_runs(m17, rule, ledger_of(scope)))

    bind.exec_driver_sql(m17._add_totals(f"{figures(new)} UNION ALL {m17._negated(figures(old))}",
                                         m17._members(tasks)))
    bind.exec_driver_sql(f"""
UPDATE ledger_run_totals t SET duplicate = d.duplicate
  FROM (SELECT c.task_id, c.run_no, coalesce(sum(c.amount) FILTER (WHERE {new.format(row='c')}), 0) AS duplicate
          FROM credit_ledger c WHERE c.task_id IN ({tasks}) GROUP BY c.task_id, c.run_no) d
 WHERE t.task_id = d.task_id AND t.run_no = d.run_no""")


def upgrade() -> None:
    _switch(OLD, STRAY_ADJUSTMENT)


def downgrade() -> None:
    _switch(STRAY_ADJUSTMENT, OLD)
