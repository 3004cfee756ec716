"""ledger_run_totals: each task run's ledger figures, kept by a trigger on every ledger insert

The spend query (schema/spend.py) reads one row per task run here instead of aggregating every
ledger row of an import at each scrape and page view. The trigger is the one piece of logic that
keeps the totals: every path that writes the ledger goes through it, in the writer's transaction.
`reelqueue ledger check` compares the totals with the ledger (rule `totals_drift`).

Revision ID: 0015
Revises: 0014
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_AMOUNT = sa.Numeric(precision=20, scale=6)
# A reviewer's regenerate books each new video as an ADJUSTMENT `...:review:{attempt}`; the run's
# last such entry (highest attempt, a missing attempt counting as highest) is the video it kept.
_ADD = """
CREATE FUNCTION ledger_run_totals_add() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  review boolean := NEW.entry_type = 'ADJUSTMENT' AND position(':review:' IN NEW.business_key) > 0;
BEGIN
  IF NEW.task_id IS NULL THEN  -- an orphan job's cost: no task run carries it
    RETURN NULL;
  END IF;
  INSERT INTO ledger_run_totals AS t (task_id, run_no, reserved, settled, released, refunded, adjusted,
                                      duplicate, last_video, last_video_attempt)
  VALUES (NEW.task_id, NEW.run_no,
          CASE WHEN NEW.entry_type = 'RESERVE' THEN NEW.amount ELSE 0 END,
          CASE WHEN NEW.entry_type = 'SETTLE' THEN NEW.amount ELSE 0 END,
          CASE WHEN NEW.entry_type = 'RELEASE' THEN NEW.amount ELSE 0 END,
          CASE WHEN NEW.entry_type = 'REFUND' THEN NEW.amount ELSE 0 END,
          CASE WHEN NEW.entry_type = 'ADJUSTMENT' THEN NEW.amount ELSE 0 END,
          CASE WHEN NEW.entry_type = 'ADJUSTMENT' AND NEW.provider_job_id IS NOT NULL THEN NEW.amount ELSE 0 END,
          CASE WHEN review THEN NEW.amount END,
          CASE WHEN review THEN coalesce(NEW.attempt_no, 2147483647) END)
  ON CONFLICT (task_id, run_no) DO UPDATE SET
    reserved = t.reserved + EXCLUDED.reserved, settled = t.settled + EXCLUDED.settled,
    released = t.released + EXCLUDED.released, refunded = t.refunded + EXCLUDED.refunded,
    adjusted = t.adjusted + EXCLUDED.adjusted, duplicate = t.duplicate + EXCLUDED.duplicate,
    last_video = CASE WHEN EXCLUDED.last_video_attempt >= coalesce(t.last_video_attempt, -1)
                      THEN EXCLUDED.last_video ELSE t.last_video END,
    last_video_attempt = greatest(t.last_video_attempt, EXCLUDED.last_video_attempt);
  RETURN NULL;
END $$
"""
# A run's totals from its ledger rows: the backfill (every run) and, on the rare UPDATE or DELETE of
# ledger rows (the ledger is append-only; a repair or a cleanup), a recount of the runs touched.
_COUNT = """
INSERT INTO ledger_run_totals (task_id, run_no, reserved, settled, released, refunded, adjusted, duplicate,
                               last_video, last_video_attempt)
SELECT c.task_id, c.run_no,
       coalesce(sum(c.amount) FILTER (WHERE c.entry_type = 'RESERVE'), 0),
       coalesce(sum(c.amount) FILTER (WHERE c.entry_type = 'SETTLE'), 0),
       coalesce(sum(c.amount) FILTER (WHERE c.entry_type = 'RELEASE'), 0),
       coalesce(sum(c.amount) FILTER (WHERE c.entry_type = 'REFUND'), 0),
       coalesce(sum(c.amount) FILTER (WHERE c.entry_type = 'ADJUSTMENT'), 0),
       coalesce(sum(c.amount) FILTER (WHERE c.entry_type = 'ADJUSTMENT' AND c.provider_job_id IS NOT NULL), 0),
       (array_agg(c.amount ORDER BY coalesce(c.attempt_no, 2147483647) DESC, c.id DESC) FILTER (WHERE r.review))[1],
       max(coalesce(c.attempt_no, 2147483647)) FILTER (WHERE r.review)
  FROM credit_ledger c
 CROSS JOIN LATERAL (SELECT c.entry_type = 'ADJUSTMENT' AND position(':review:' IN c.business_key) > 0 AS review) r
 WHERE c.task_id IS NOT NULL {runs}
 GROUP BY c.task_id, c.run_no
"""
_RECOUNT = f"""
CREATE FUNCTION ledger_run_totals_recount() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM ledger_run_totals t USING old_rows o WHERE t.task_id = o.task_id AND t.run_no = o.run_no;
  {_COUNT.format(runs="AND (c.task_id, c.run_no) IN (SELECT task_id, run_no FROM old_rows)")};
  RETURN NULL;
END $$
"""


def upgrade() -> None:
    op.create_table(
        "ledger_run_totals",
        sa.Column("task_id", sa.String(64), primary_key=True),
        sa.Column("run_no", sa.Integer, primary_key=True),
        *(sa.Column(name, _AMOUNT, nullable=False, server_default="0")
          for name in ("reserved", "settled", "released", "refunded", "adjusted", "duplicate")),
        sa.Column("last_video", _AMOUNT),
        sa.Column("last_video_attempt", sa.Integer),
    )
    bind = op.get_bind()
    bind.exec_driver_sql("LOCK TABLE credit_ledger IN SHARE MODE")  # no insert between backfill and trigger
    bind.exec_driver_sql(_ADD)
    bind.exec_driver_sql("CREATE TRIGGER ledger_run_totals_add AFTER INSERT ON credit_ledger "
                         "FOR EACH ROW EXECUTE FUNCTION ledger_run_totals_add()")
    bind.exec_driver_sql(_RECOUNT)
    for event in ("UPDATE", "DELETE"):
        bind.exec_driver_sql(f"CREATE TRIGGER ledger_run_totals_{event.lower()} AFTER {event} ON credit_ledger "
                             "REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT "
                             "EXECUTE FUNCTION ledger_run_totals_recount()")
    bind.exec_driver_sql(_COUNT.format(runs=""))


def downgrade() -> None:
    for trigger in ("add", "update", "delete"):
        op.execute(f"DROP TRIGGER ledger_run_totals_{trigger} ON credit_ledger")
    op.execute("DROP FUNCTION ledger_run_totals_add()")
    op.execute("DROP FUNCTION ledger_run_totals_recount()")
    op.drop_table("ledger_run_totals")
