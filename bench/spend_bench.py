"""Spend benchmark (run on demand: `python -m bench.spend_bench`): what an import's spend costs to
read at a large import, for the spend gauges of /metrics and the overview page.

Starts its own Postgres and S3 under a temporary REELQUEUE_HOME, imports a generated catalog
(25,000 rows x 8 combinations = 200,000 tasks by default), then gives every task a finished run in
SQL: a RESERVE, a SETTLE (SUCCEEDED, 80 %) or a RELEASE (FAILED_FINAL), a stray's ADJUSTMENT on 1 %
and a REFUND on 1 %, and four applied state events. It then times `reelqueue spend`'s query, the
/metrics snapshot query (which includes it) and the whole overview page, each the median of a few
runs. Nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from collections.abc import Callable

from sqlalchemy import text

from bench.import_bench import PLAN, write_catalog

_FINISH = """
UPDATE tasks SET status = CASE WHEN product_ref % 5 = 0 THEN 'FAILED_FINAL' ELSE 'SUCCEEDED' END,
       version = 4, current_attempt_no = 1, started_at = now(), finished_at = now(), updated_at = now()
 WHERE import_id = :imp
"""
_LEDGER = """
INSERT INTO credit_ledger (tenant_id, task_id, entry_type, amount, business_key, attempt_no, provider_job_id, run_no)
SELECT t.tenant_id, t.id, e.kind, e.amount,
       CASE WHEN e.job IS NULL THEN t.id || '/' || e.kind || '/bench'
            ELSE 'adjustment:' || t.id || ':job:' || e.job END,  -- a stray's key (schema/strays.py)
       1, e.job, 1
  FROM tasks t CROSS JOIN LATERAL (VALUES
       ('RESERVE', t.estimated_cost, NULL),
       (CASE WHEN t.status = 'SUCCEEDED' THEN 'SETTLE' ELSE 'RELEASE' END, t.estimated_cost, NULL),
       (CASE WHEN t.product_ref % 100 = 1 THEN 'ADJUSTMENT' END, t.estimated_cost, 'stray-' || t.id),
       (CASE WHEN t.product_ref % 100 = 2 AND t.status = 'SUCCEEDED' THEN 'REFUND' END, 1, NULL)
  ) AS e(kind, amount, job)
 WHERE t.import_id = :imp AND e.kind IS NOT NULL
"""
_EVENTS = """
INSERT INTO state_events (task_id, attempt_no, source, source_event_id, event, from_status, to_status,
                          task_version, applied, payload, created_at)
SELECT t.id, 1, 'workflow', t.id || '/bench/' || s.n, s.event, s.a, s.b, s.n, true, '{}'::jsonb,
       now() - interval '1 hour' + s.n * interval '10 minutes'
  FROM tasks t CROSS JOIN LATERAL (VALUES
       (1, 'reserve', 'CREATED', 'QUOTA_RESERVED'), (2, 'queue', 'QUOTA_RESERVED', 'QUEUED'),
       (3, 'submit', 'QUEUED', 'RUNNING'), (4, 'finish', 'RUNNING', t.status)) AS s(n, event, a, b)
 WHERE t.import_id = :imp
"""


def median_s(run: Callable[[], object], times: int) -> float:
    took = []
    for _ in range(times):
        t0 = time.perf_counter()
        run()
        took.append(time.perf_counter() - t0)
    return statistics.median(took)


def page_parts(db, import_id: str, times: int) -> dict[str, float]:  # noqa: ANN001 - a schema.db.Database
    """The overview page's reads one by one (medians): which of them the page's time is."""
    from control import overview as page
    from schema import import_totals

    def timed(read: Callable[[object], object]) -> float:
        def run() -> object:
            with db.transaction() as session:
                session.execute(page.NO_JIT)
                return read(session)
        return median_s(run, times)

    return {"counts": timed(lambda s: import_totals.status_counts(s, import_id)),
            "chart": timed(lambda s: page._progress(s, import_id, s.get(page.CatalogImport, import_id).created_at,
                                                    200_000, False)),
            "failures": timed(lambda s: page._failures(s, import_id)),
            "thumbnails": timed(lambda s: page._thumbnails(s, import_id)),
            "task list": timed(lambda s: page._tasks(s, import_id))}


def explain(db, import_id: str) -> None:  # noqa: ANN001 - a schema.db.Database
    """The plans of the overview page's reads over an import's tasks (EXPLAIN ANALYZE)."""
    from control import overview as page

    for name, query, params in (("failures", page._FAILURES, {"n": page.FAILURES_READ + 1}),
                                ("thumbnails", page._THUMBNAILS, {}), ("task list", page._TASKS, {})):
        with db.transaction() as session:
            session.execute(page.NO_JIT)
            plan = session.execute(text("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + query.text),
                                   {"imp": import_id, **params}).scalars()
            print(f"-- {name}", *plan, sep="\n")


def rebuild_0018(database_url: str) -> float:
    """Seconds to build migration 0018's indexes over the seeded tasks (down to 0017, up again)."""
    from alembic import command

    from schema.migrate import alembic_config, upgrade

    command.downgrade(alembic_config(database_url), "0017")
    t0 = time.perf_counter()
    upgrade(database_url, "0018")
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=25_000, help="catalog rows (8 tasks each)")
    parser.add_argument("--times", type=int, default=5, help="runs per figure (the median is printed)")
    parser.add_argument("--explain", action="store_true",
                        help="print the plans of the overview's reads and time building migration 0018's indexes")
    args = parser.parse_args()

    from bench.common import database_and_storage, fresh_home

    home = fresh_home("reelqueue-spend-bench-")

    import devstack
    from catalog.plan import load_plan
    from catalog.service import run_import
    from control.overview import overview
    from metrics.collector import SNAPSHOT_SQL
    from schema.db import Database
    from schema.spend import NO_JIT, import_spend

    settings = database_and_storage()
    try:
        catalog, plan_path = home / "catalog.csv", home / "plan.toml"
        write_catalog(catalog, args.rows)
        plan_path.write_text(PLAN)
        summary = run_import(settings, catalog, load_plan(plan_path), catalog="bench", check_urls=False)
        db = Database(settings.database_url)
        t0 = time.perf_counter()
        with db.transaction() as session:
            for sql in (_FINISH, _LEDGER, _EVENTS):
                session.execute(text(sql), {"imp": summary.import_id})
        with db.engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("VACUUM ANALYZE"))
        with db.transaction() as session:
            ledger_rows = session.scalar(text("SELECT count(*) FROM credit_ledger"))
        print(f"seeded {summary.tasks:,} tasks, {ledger_rows:,} ledger rows in {time.perf_counter() - t0:.1f} s")

        def spend() -> object:
            with db.transaction() as session:
                return import_spend(session, [summary.import_id])

        def scrape() -> object:
            with db.engine.connect() as conn:
                conn.execute(NO_JIT)
                return conn.execute(SNAPSHOT_SQL).all()

        def page() -> object:
            with db.transaction() as session:
                return overview(session, summary.import_id)

        print(f"spend query:      {median_s(spend, args.times):.3f} s")
        print(f"metrics snapshot: {median_s(scrape, args.times):.3f} s")
        print(f"overview page:    {median_s(page, args.times):.3f} s")
        for part, took in page_parts(db, summary.import_id, args.times).items():
            print(f"  {part + ':':<16}{took:.3f} s")
        if args.explain:
            explain(db, summary.import_id)
            print(f"migration 0018's indexes built in {rebuild_0018(settings.database_url):.1f} s")
        print(spend()[summary.import_id].model_dump(include={"reserved", "settled", "released", "charged", "wasted"}))
    finally:
        devstack.down(settings)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
