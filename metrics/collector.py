"""Gauges that are facts in Postgres, read with one query per scrape.

The query touches only started, unfinished tasks (the partial index `ix_tasks_active`; imported
tasks never run, CREATED, are left out), their reservations (credit_ledger by task id) and
unclaimed webhooks (the partial index on orphans), so its cost follows the work in flight, not the
size of the catalog. The spend gauges (schema/spend.py) cover the imports in view: those with a
started, unfinished task and the RECENT_IMPORTS newest; each is read from its running totals
(schema/import_totals.py), a few rows per import whatever its size.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import text

from config.defaults import ProviderLimits
from contracts.task import TaskStatus
from schema.db import Database
from schema.import_totals import totals_sql
from schema.spend import FIGURES, NO_JIT, WASTE_CAUSES, Spend, spend_from_row
from schema.state_machine import TERMINAL

log = logging.getLogger("gateway.metrics")
_SKIPPED = ", ".join(f"'{s.value}'" for s in sorted(TERMINAL | {TaskStatus.CREATED}))
# Statuses in which a task holds (or is taking) a provider slot.
PROVIDER_ACTIVE = (TaskStatus.DISPATCHING, TaskStatus.SUBMITTED, TaskStatus.SUBMIT_UNKNOWN, TaskStatus.RUNNING)
RECENT_IMPORTS = 3  # spend gauges also for the newest imports, finished or not
_IN_VIEW = (f"SELECT DISTINCT import_id AS id FROM tasks WHERE status NOT IN ({_SKIPPED}) "
            f"UNION SELECT id FROM (SELECT id FROM catalog_imports ORDER BY created_at DESC LIMIT {RECENT_IMPORTS}) r")
_SPEND_ROWS = ", ".join(f"('{f}', s.{f})" for f in FIGURES)

SNAPSHOT_SQL = text(f"""
WITH active AS (
  SELECT id, tenant_id, provider, status, run_no, updated_at FROM tasks WHERE status NOT IN ({_SKIPPED})
)
SELECT 'task' AS kind, status AS a, provider AS b, count(*)::float8 AS value,
       extract(epoch FROM now() - min(updated_at))::float8 AS age
  FROM active GROUP BY status, provider
UNION ALL
SELECT 'reserved', a.tenant_id, '', coalesce(sum(c.amount), 0)::float8,
       extract(epoch FROM now() - min(c.created_at))::float8
  FROM active a JOIN credit_ledger c ON c.task_id = a.id AND c.run_no = a.run_no AND c.entry_type = 'RESERVE'
 WHERE NOT EXISTS (SELECT 1 FROM credit_ledger s WHERE s.task_id = a.id AND s.run_no = a.run_no
                     AND s.entry_type IN ('SETTLE', 'RELEASE'))
 GROUP BY a.tenant_id
UNION ALL
SELECT 'orphan', provider, '', count(*)::float8, extract(epoch FROM now() - min(received_at))::float8
  FROM provider_events WHERE state = 'orphan' GROUP BY provider
UNION ALL
SELECT 'spend', s.import_id, f.name, coalesce(f.value, 0)::float8, NULL
  FROM ({totals_sql(_IN_VIEW)}) s CROSS JOIN LATERAL (VALUES {_SPEND_ROWS}) AS f(name, value)
""")


class PostgresCollector(Collector):
    """Registered once per process that serves /metrics with database access (the gateway)."""

    def __init__(self, db: Database, limits: Mapping[str, ProviderLimits], providers: list[str]):
        self.db = db
        self.limits = limits
        self.providers = providers  # always reported (0 when idle), so dashboards see them

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(())  # collected at scrape time only: registering runs no query

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The snapshot's gauges; with Postgres unreachable only `reelqueue_database_up 0`, so the
        scrape still carries the process's own counters."""
        up = GaugeMetricFamily("reelqueue_database_up", "1 when the Postgres gauges could be read at this scrape")
        try:
            with self.db.engine.connect() as conn:
                conn.execute(NO_JIT)  # for this transaction only
                rows = conn.execute(SNAPSHOT_SQL).all()
        except Exception as exc:  # noqa: BLE001 - any database failure: report it, never fail the scrape
            log.warning("metrics snapshot query failed: %s", type(exc).__name__)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from snapshot_metrics(rows, self.limits, self.providers)


def snapshot_metrics(rows, limits: Mapping[str, ProviderLimits], providers: list[str]) -> Iterator[GaugeMetricFamily]:  # noqa: ANN001
    """The gauges from the snapshot query's rows (kind, a, b, value, age)."""
    tasks = GaugeMetricFamily("reelqueue_tasks", "Started, unfinished tasks by status", labels=["status", "provider"])
    depth = GaugeMetricFamily("reelqueue_queue_depth", "Tasks QUEUED for a provider slot", labels=["provider"])
    oldest = GaugeMetricFamily("reelqueue_queue_oldest_age_seconds", "Age of the oldest QUEUED task's wait",
                               labels=["provider"])
    unknown = GaugeMetricFamily("reelqueue_submit_unknown", "Tasks whose submit outcome is unknown (reconciling)",
                                labels=["provider"])
    active = GaugeMetricFamily("reelqueue_provider_active", "Tasks holding a provider slot (dispatching, "
                               "submitted, submit unknown, running)", labels=["provider"])
    limit = GaugeMetricFamily("reelqueue_provider_limit", "Configured concurrent jobs per provider (plans may "
                              "ask for less)", labels=["provider"])
    polls = GaugeMetricFamily("reelqueue_provider_polls_per_second", "Configured status calls per second per "
                              "provider, shared by every worker (the polling budget; none: no series)",
                              labels=["provider"])
    backlog = GaugeMetricFamily("reelqueue_fetch_backlog", "Tasks whose output is being fetched (OUTPUT_FETCHING)",
                                labels=["provider"])
    backlog_age = GaugeMetricFamily("reelqueue_fetch_backlog_oldest_age_seconds",
                                    "Age of the oldest OUTPUT_FETCHING task", labels=["provider"])
    reserved = GaugeMetricFamily("reelqueue_reserved_credit", "Credit reserved by unfinished tasks, not yet "
                                 "settled or released", labels=["tenant"])
    reserved_age = GaugeMetricFamily("reelqueue_reserved_credit_oldest_age_seconds",
                                     "Age of the oldest open reservation", labels=["tenant"])
    orphans = GaugeMetricFamily("reelqueue_webhook_orphans", "Stored webhooks no attempt has claimed yet",
                                labels=["provider"])
    orphan_age = GaugeMetricFamily("reelqueue_webhook_orphan_oldest_age_seconds", "Age of the oldest orphan webhook",
                                   labels=["provider"])
    per_provider: dict[str, dict[str, tuple[float, float]]] = {p: {} for p in providers}
    spends: dict[str, dict[str, float]] = {}
    for kind, a, b, value, age in rows:
        if kind == "task":
            tasks.add_metric([a, b], value)
            per_provider.setdefault(b, {})[a] = (value, age or 0.0)
        elif kind == "reserved":
            reserved.add_metric([a], value)
            reserved_age.add_metric([a], age or 0.0)
        elif kind == "orphan":
            orphans.add_metric([a], value)
            orphan_age.add_metric([a], age or 0.0)
        elif kind == "spend":
            spends.setdefault(a, {"import_id": a})[b] = value
    for provider, by_status in sorted(per_provider.items()):
        queued, age = by_status.get(TaskStatus.QUEUED.value, (0.0, 0.0))
        depth.add_metric([provider], queued)
        oldest.add_metric([provider], age)
        unknown.add_metric([provider], by_status.get(TaskStatus.SUBMIT_UNKNOWN.value, (0.0, 0.0))[0])
        active.add_metric([provider], sum(by_status.get(s.value, (0.0, 0.0))[0] for s in PROVIDER_ACTIVE))
        configured = limits.get(provider) or ProviderLimits()
        limit.add_metric([provider], configured.max_concurrent)
        if configured.polls_per_second is not None:
            polls.add_metric([provider], configured.polls_per_second)
        fetching, fetch_age = by_status.get(TaskStatus.OUTPUT_FETCHING.value, (0.0, 0.0))
        backlog.add_metric([provider], fetching)
        backlog_age.add_metric([provider], fetch_age)
    yield from (tasks, depth, oldest, unknown, active, limit, polls, backlog, backlog_age, reserved, reserved_age,
                orphans, orphan_age)
    yield from spend_metrics([spend_from_row(figures) for _, figures in sorted(spends.items())])


def spend_metrics(spends: list[Spend]) -> Iterator[GaugeMetricFamily]:
    """The figures of `reelqueue spend` for the imports in view, one series per import."""
    credits = GaugeMetricFamily("reelqueue_import_credits", "An import's credits by ledger figure: reserved, "
                                "settled, released, refunded, adjustments, charged, held", labels=["import", "kind"])
    wasted = GaugeMetricFamily("reelqueue_import_wasted_credits", "Credits charged for no kept video, by cause: "
                               + ", ".join(WASTE_CAUSES), labels=["import", "cause"])
    videos = GaugeMetricFamily("reelqueue_import_videos", "An import's SUCCEEDED videos and those a reviewer approved",
                               labels=["import", "kind"])
    per_video = GaugeMetricFamily("reelqueue_import_cost_per_video", "Everything an import was charged per "
                                  "SUCCEEDED (or approved) video; absent while there is none",
                                  labels=["import", "basis"])
    for s in spends:
        for kind in ("reserved", "settled", "released", "refunded", "adjustments", "charged", "held"):
            credits.add_metric([s.import_id, kind], float(getattr(s, kind)))
        for cause, amount in s.wasted.items():
            wasted.add_metric([s.import_id, cause], float(amount))
        for basis, count, cost in (("succeeded", s.succeeded, s.cost_per_succeeded),
                                   ("approved", s.approved, s.cost_per_approved)):
            videos.add_metric([s.import_id, basis], count)
            if cost is not None:
                per_video.add_metric([s.import_id, basis], float(cost))
    yield from (credits, wasted, videos, per_video)
