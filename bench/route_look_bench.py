"""Route look benchmark (run on demand: `python -m bench.route_look_bench`): what the looks of tasks waiting in
a gate's line with fallback routes cost Postgres.

Starts its own Postgres (and S3, for the import) under a temporary REELQUEUE_HOME, imports a catalog whose
tasks wait (QUEUED, reservation held) beside a tenant ledger of past work, and times the route step's
transaction as a look makes it (`RoutingActivities._take`, take = false): statements and milliseconds per look,
for routes that cost no more than the task holds (the common case: no ledger sum) and for a dearer one (the
tenant's credit summed). Then Postgres time per minute for the waiting tasks at the two spacings of
route-look-v1: one look a minute while a route is unhealthy, one each ten minutes while all are healthy. The
gates' snapshots a look also reads are Temporal queries, not counted here.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import event, text

from bench.import_bench import PLAN, write_catalog
from bench.spend_bench import _FINISH, _LEDGER

_WAIT = "UPDATE tasks SET status = 'QUEUED', version = 3 WHERE import_id = :imp"
_HOLD = """
INSERT INTO credit_ledger (tenant_id, task_id, entry_type, amount, business_key, run_no)
SELECT tenant_id, id, 'RESERVE', estimated_cost, 'reserve:' || id, 1 FROM tasks WHERE import_id = :imp
"""


@contextmanager
def counted(engine) -> Iterator[list[int]]:  # noqa: ANN001 - a sqlalchemy Engine
    """Statements sent inside the block."""
    count = [0]

    def one(*_: object) -> None:
        count[0] += 1

    event.listen(engine, "before_cursor_execute", one)
    try:
        yield count
    finally:
        event.remove(engine, "before_cursor_execute", one)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=1_000, help="waiting tasks (8 per catalog row)")
    parser.add_argument("--past", type=int, default=40_000, help="earlier tasks of the tenant, ended, in its ledger")
    args = parser.parse_args()

    from bench.common import database_and_storage, fresh_home

    home = fresh_home("reelqueue-route-look-bench-")

    import devstack
    from activities.routing import RoutingActivities
    from adapters.providers import build_providers
    from catalog.plan import load_plan
    from catalog.service import run_import
    from contracts.admission import BreakerMode
    from contracts.messages import RouteRequest
    from contracts.routing import Route, RouteFacts
    from schema import queries
    from schema.db import Database

    settings = database_and_storage()
    try:
        plan_path = home / "plan.toml"
        plan_path.write_text(PLAN)
        imported = {}
        for name, count in (("past", args.past), ("waiting", args.tasks)):
            write_catalog(home / f"{name}.csv", max(1, count // 8))
            imported[name] = run_import(settings, home / f"{name}.csv", load_plan(plan_path), catalog=name,
                                        check_urls=False).import_id
        db = Database(settings.database_url)
        with db.transaction() as session:
            for sql in (_FINISH, _LEDGER):  # the tenant's past work: ended tasks with their ledger rows
                session.execute(text(sql), {"imp": imported["past"]})
            for sql in (_WAIT, _HOLD):
                session.execute(text(sql), {"imp": imported["waiting"]})
            tasks = queries.list_tasks(session, imported["waiting"])
            rows = session.scalar(text("SELECT count(*) FROM credit_ledger"))
        with db.engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("VACUUM ANALYZE"))
        print(f"{len(tasks):,} waiting tasks; the tenant's ledger: {rows:,} rows")

        primary = Route(provider="emulator", model=tasks[0].model)
        cheap, dear = Route(provider="runway", model="gen4_turbo"), Route(provider="kling", model="kling-v2-1")
        providers = build_providers(settings.model_copy(update={
            "emulate_providers": True, "runway_prices": {"gen4_turbo": 0.01}, "kling_prices": {"kling-v2-1": 100.0}}))
        routing = RoutingActivities(db, None, providers, plans=lambda *_: None)

        def looks(fallback: Route) -> tuple[float, float]:
            """Milliseconds and statements per look, the primary's breaker open (the look weighs a fallback)."""
            facts = [RouteFacts(route=primary, price=0.0, breaker=BreakerMode.OPEN),
                     RouteFacts(route=fallback, price=0.0)]
            took = []
            with counted(db.engine) as statements:
                for task in tasks:
                    req = RouteRequest(task_id=task.id, attempt_no=1, current=primary, take=False)
                    t0 = time.perf_counter()
                    routing._take(req, facts, lock_model=False, duration_s=float(task.duration_s))
                    took.append((time.perf_counter() - t0) * 1000)
            return statistics.median(took), statements[0] / len(tasks)

        for name, fallback in (("fallback within the hold", cheap), ("dearer fallback (ledger sum)", dear)):
            ms, per = looks(fallback)
            print(f"{name + ':':<30} {ms:6.2f} ms a look (median), {per:.1f} statements; "
                  f"{len(tasks):,} tasks: {ms * len(tasks) / 1000:6.2f} s of Postgres a minute at one look a "
                  f"minute, {ms * len(tasks) / 10_000:6.2f} s at one each ten minutes")
    finally:
        devstack.down(settings)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
