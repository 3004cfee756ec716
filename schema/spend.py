"""What an import cost, read from the credit ledger: `reelqueue spend`, the overview page and the
spend gauges of /metrics share one query (docs/architecture.md, "Spend and waste").

The figures are read from the import's running totals (`import_totals`, schema/import_totals.py:
a few rows per import, kept by triggers in the writers' transactions). `spend_sql` is the recount
they must equal: a sum over the import's task runs of their ledger rows; `reelqueue ledger check`
compares the two. The waste causes split the charged credits (SETTLE +
ADJUSTMENT - REFUND) of runs that ended without a kept video, by how they ended.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from pydantic import BaseModel
from sqlalchemy import text
from sqlalchemy.orm import Session

from contracts.task import TaskStatus
from schema.import_totals import TOTALS_OF
from schema.strays import STRAY_ADJUSTMENT

# Cause -> the statuses a run ended in for its charged credits to be that waste.
WASTE_BY_END: dict[str, tuple[str, ...]] = {
    "cancelled": (TaskStatus.CANCELED.value,),
    "failed": (TaskStatus.FAILED_FINAL.value, TaskStatus.EXPIRED.value),
    "rejected": (TaskStatus.REJECTED.value,),
}
WASTE_CAUSES = ("duplicate", *WASTE_BY_END, "regenerated")

# One row per import of `wanted` (a query of import ids). `scope`: the import's tasks, created or
# reused (schema.import_scope). `ends`: how each earlier run of a task ended (the status a redrive
# started the next run from; the n-th redrive closes run n), looked up for re-run tasks only; the
# current run ends in the task's status. Stray jobs' ADJUSTMENTs (schema/strays.py's key, not the
# backstop's corrections of an attempt's own job, which carry a job id too): duplicates, whatever
# became of the task. A reviewer's regenerate books the new video as an ADJUSTMENT
# `...:review:{attempt}`: in a run that ended SUCCEEDED, everything charged but the last of those
# paid for videos replaced at review. Approved videos: a reviewed video has its automatic checks,
# so the events of unreviewed tasks are never read.
_SPEND_SQL = """
WITH wanted AS ({wanted}), scope AS (
  SELECT t.import_id, t.id AS task_id, t.status, t.run_no FROM tasks t
   WHERE t.import_id = ANY (ARRAY(SELECT id FROM wanted))
  UNION ALL
  SELECT it.import_id, t.id, t.status, t.run_no
    FROM import_tasks it JOIN tasks t ON t.id = it.task_id WHERE it.import_id = ANY (ARRAY(SELECT id FROM wanted))
), ends AS (
  SELECT e.task_id, row_number() OVER (PARTITION BY e.task_id ORDER BY e.id) AS run_no, e.from_status AS ended
    FROM state_events e
   WHERE e.event = 'redrive' AND e.applied AND e.task_id IN (SELECT task_id FROM scope WHERE run_no > 1)
), ledger AS (  -- per task and run, summed from the ledger rows
  SELECT c.task_id, c.run_no, {sums},
         coalesce(sum(c.amount) FILTER (WHERE {duplicate}), 0) AS duplicate,
         (array_agg(c.amount ORDER BY coalesce(c.attempt_no, 2147483647) DESC, c.id DESC)
            FILTER (WHERE c.entry_type = 'ADJUSTMENT' AND position(':review:' IN c.business_key) > 0))[1] AS last_video
    FROM credit_ledger c WHERE c.task_id IN (SELECT task_id FROM scope) GROUP BY c.task_id, c.run_no
), runs AS (
  SELECT s.import_id, CASE WHEN l.run_no = s.run_no THEN s.status ELSE r.ended END AS ended, l.*
    FROM scope s JOIN ledger l ON l.task_id = s.task_id
    LEFT JOIN ends r ON r.task_id = l.task_id AND r.run_no = l.run_no
), money AS (
  SELECT import_id, sum(reserved) AS reserved, sum(settled) AS settled, sum(released) AS released,
         sum(refunded) AS refunded, sum(adjusted) AS adjusted, sum(duplicate) AS duplicate,
         {causes},
         coalesce(sum(own - last_video) FILTER (WHERE ended = 'SUCCEEDED' AND last_video IS NOT NULL), 0)
           AS regenerated
    FROM (SELECT *, settled + adjusted - refunded - duplicate AS own FROM runs) charged GROUP BY import_id
), videos AS (
  SELECT s.import_id, count(*) AS succeeded,
         count(*) FILTER (WHERE EXISTS (SELECT 1 FROM review_checks k WHERE k.task_id = s.task_id)
                            AND EXISTS (SELECT 1 FROM state_events e WHERE e.task_id = s.task_id
                                          AND e.event = 'review_approved' AND e.applied)) AS approved
    FROM scope s WHERE s.status = 'SUCCEEDED' GROUP BY s.import_id
)
SELECT w.id AS import_id, m.reserved, m.settled, m.released, m.refunded, m.adjusted, m.duplicate,
       {cause_columns}, m.regenerated, coalesce(v.succeeded, 0) AS succeeded, coalesce(v.approved, 0) AS approved
  FROM wanted w LEFT JOIN money m ON m.import_id = w.id LEFT JOIN videos v ON v.import_id = w.id
"""
_CAUSES = ", ".join(f"coalesce(sum(own) FILTER (WHERE ended IN ({', '.join(repr(s) for s in ends)})), 0) AS {cause}"
                    for cause, ends in WASTE_BY_END.items())
_SUMS = ", ".join(f"coalesce(sum(c.amount) FILTER (WHERE c.entry_type = '{kind}'), 0) AS {column}"
                  for kind, column in (("RESERVE", "reserved"), ("SETTLE", "settled"), ("RELEASE", "released"),
                                       ("REFUND", "refunded"), ("ADJUSTMENT", "adjusted")))
FIGURES = ("reserved", "settled", "released", "refunded", "adjusted", "duplicate", *WASTE_BY_END, "regenerated",
           "succeeded", "approved")  # the query's columns besides import_id


def spend_sql(wanted: str) -> str:
    """The recount of the spend over the imports `wanted` selects (a SQL query with one column, `id`),
    for text(): it reads every task and ledger row of those imports (`reelqueue ledger check` only)."""
    return _SPEND_SQL.format(wanted=wanted, causes=_CAUSES, cause_columns=", ".join(f"m.{c}" for c in WASTE_BY_END),
                             sums=_SUMS, duplicate=STRAY_ADJUSTMENT.format(row="c"))


# A big import's aggregate has a planner cost that turns JIT on, whose compiling took longer here
# (up to 0.9 s) than the query itself: these reads run without it, for their own transaction.
NO_JIT = text("SET LOCAL jit = off")



class Spend(BaseModel):
    """One import's credits. `charged` = settled + adjustments - refunds (what the tenant pays);
    `held` = reservations neither settled nor released yet (tasks under way)."""

    import_id: str
    reserved: Decimal = Decimal(0)
    settled: Decimal = Decimal(0)
    released: Decimal = Decimal(0)
    refunded: Decimal = Decimal(0)
    adjustments: Decimal = Decimal(0)
    charged: Decimal = Decimal(0)
    held: Decimal = Decimal(0)
    wasted: dict[str, Decimal] = {}
    wasted_total: Decimal = Decimal(0)
    succeeded: int = 0
    approved: int = 0
    cost_per_succeeded: Decimal | None = None  # everything charged / SUCCEEDED videos
    cost_per_approved: Decimal | None = None  # everything charged / videos a reviewer approved

    def as_json(self) -> dict:
        """Credits as JSON numbers: the shape `reelqueue spend --json` prints."""
        return {k: _number(v) for k, v in self.model_dump().items()} | {
            "wasted": {k: float(v) for k, v in self.wasted.items()}}


def _number(value: object) -> object:
    return float(value) if isinstance(value, Decimal) else value


def import_spend(session: Session, import_ids: Sequence[str]) -> dict[str, Spend]:
    """The spend of each import in `import_ids` that exists (an import with no ledger row: all zero)."""
    ids = list(dict.fromkeys(import_ids))
    if not ids:
        return {}
    return {row["import_id"]: spend_from_row(row) for row in session.execute(TOTALS_OF, {"ids": ids}).mappings()}


def spend_from_row(row) -> Spend:  # noqa: ANN001 - a mapping of the spend query's columns
    figures = {k: Decimal(row[k] or 0) for k in FIGURES}
    spend = Spend(import_id=row["import_id"], reserved=figures["reserved"], settled=figures["settled"],
                  released=figures["released"], refunded=figures["refunded"], adjustments=figures["adjusted"],
                  wasted={cause: figures[cause] for cause in WASTE_CAUSES},
                  succeeded=int(figures["succeeded"]), approved=int(figures["approved"]))
    spend.charged = spend.settled + spend.adjustments - spend.refunded
    spend.held = spend.reserved - spend.settled - spend.released
    spend.wasted_total = sum(spend.wasted.values(), Decimal(0))
    spend.cost_per_succeeded = _per(spend.charged, spend.succeeded)
    spend.cost_per_approved = _per(spend.charged, spend.approved)
    return spend


def _per(amount: Decimal, count: int) -> Decimal | None:
    return (amount / count).quantize(Decimal("0.000001")) if count else None
