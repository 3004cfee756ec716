"""The Postgres snapshot's rows become the documented gauges (pure logic; the query runs in
tests/integration/test_metrics.py)."""

from __future__ import annotations

from config.defaults import ProviderLimits
from metrics.collector import snapshot_metrics


def _values(families) -> dict[tuple[str, tuple[str, ...]], float]:
    return {(s.name, tuple(s.labels.values())): s.value for f in families for s in f.samples}


def test_rows_become_per_provider_gauges() -> None:
    rows = [
        ("task", "QUEUED", "emulator", 5.0, 42.0),
        ("task", "RUNNING", "emulator", 3.0, 10.0),
        ("task", "SUBMIT_UNKNOWN", "emulator", 1.0, 2.0),
        ("task", "OUTPUT_FETCHING", "emulator", 2.0, 7.5),
        ("reserved", "default", "", 12.5, 99.0),
        ("orphan", "emulator", "", 4.0, 30.0),
    ]
    limits = {"emulator": ProviderLimits(max_concurrent=50, polls_per_second=20)}
    got = _values(snapshot_metrics(rows, limits, ["emulator", "idle"]))
    assert got[("reelqueue_queue_depth", ("emulator",))] == 5
    assert got[("reelqueue_queue_oldest_age_seconds", ("emulator",))] == 42
    assert got[("reelqueue_provider_active", ("emulator",))] == 4  # running + submit unknown
    assert got[("reelqueue_submit_unknown", ("emulator",))] == 1
    assert got[("reelqueue_fetch_backlog", ("emulator",))] == 2
    assert got[("reelqueue_fetch_backlog_oldest_age_seconds", ("emulator",))] == 7.5
    assert got[("reelqueue_provider_limit", ("emulator",))] == 50
    assert got[("reelqueue_provider_polls_per_second", ("emulator",))] == 20
    assert got[("reelqueue_reserved_credit", ("default",))] == 12.5
    assert got[("reelqueue_reserved_credit_oldest_age_seconds", ("default",))] == 99
    assert got[("reelqueue_webhook_orphans", ("emulator",))] == 4
    # an idle provider is still reported, with the default limit
    assert got[("reelqueue_queue_depth", ("idle",))] == 0
    assert got[("reelqueue_provider_limit", ("idle",))] == 20
    assert ("reelqueue_provider_polls_per_second", ("idle",)) not in got  # no budget: no series


def test_an_unreachable_database_is_reported_not_raised() -> None:
    from metrics.collector import PostgresCollector
    from schema.db import Database

    collector = PostgresCollector(Database("postgresql+psycopg://nobody@127.0.0.1:1/none"), {}, ["emulator"])
    assert _values(collector.collect()) == {("reelqueue_database_up", ()): 0}
