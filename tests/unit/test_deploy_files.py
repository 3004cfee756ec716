"""The monitoring files (deploy/monitoring/), checked statically: no Docker, Prometheus or Grafana runs
here (docs/deploy.md); the Kubernetes manifests are tests/unit/test_kubernetes.py's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from metrics.queries import names, panels

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
NOWHERE_DB = "postgresql+psycopg://nobody@127.0.0.1:1/nothing?connect_timeout=2"
# Series Prometheus makes itself, not the code.
PROMETHEUS_OWN = {"up"}
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def _exported() -> set[str]:
    """Every series name the worker and the gateway export (metrics/ and metrics/collector.py), the
    Temporal SDK's worker-tuning series the worker passes on (metrics/sdk.py) and the provider gate's
    breaker series."""
    import metrics
    from metrics.collector import PostgresCollector, snapshot_metrics
    from metrics.sdk import TUNING_SIGNALS
    from schema.db import Database
    from workflows.provider_gate import BREAKER_OPENS, BREAKER_STATE

    families = [m for m in vars(metrics).values() if hasattr(m, "describe") and hasattr(m, "_name")]
    families = [f for metric in families for f in metric.describe()]
    families += list(snapshot_metrics([], {}, ["emulator"]))
    families += list(PostgresCollector(Database(NOWHERE_DB), {}, []).collect())  # reelqueue_database_up
    names = {family.name + suffix for family in families for suffix in _SUFFIXES.get(family.type, ("",))}
    names |= {name + suffix for name, kind in TUNING_SIGNALS.items() for suffix in _SUFFIXES[kind]}
    names |= {BREAKER_STATE, BREAKER_OPENS + "_total"}  # the gate's, through the SDK's meter (metrics/sdk.py)
    assert {"reelqueue_submits_total", "reelqueue_queue_depth", "reelqueue_database_up",
            "reelqueue_webhook_lag_seconds_bucket", "reelqueue_credit_spent_total"} <= names
    return names


def _alert_rules() -> list[dict]:
    groups = yaml.safe_load((MONITORING / "alerts.yml").read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def _dashboard_queries() -> list[str]:
    """reelqueue.json's queries (the Temporal dashboards read the server's and the SDK's names:
    tests/integration/test_dashboard_metrics.py checks those against live endpoints)."""
    return [expr for panel in panels(MONITORING / "grafana" / "dashboards" / "reelqueue.json") for expr in panel.exprs]


@pytest.fixture(scope="module")
def exported() -> set[str]:
    return _exported()


def _names(expr: str) -> set[str]:
    found = names(expr)
    assert found, f"no metric in {expr!r}"
    return found


def test_every_dashboard_query_names_only_metrics_the_code_exports(exported: set[str]) -> None:
    queries = _dashboard_queries()
    assert len(queries) >= 15
    for expr in queries:
        assert _names(expr) <= exported, expr


def test_the_dashboard_covers_queues_states_spend_webhooks_and_slots() -> None:
    text = " ".join(_dashboard_queries())
    for needle in ("reelqueue_queue_depth", "reelqueue_queue_oldest_age_seconds", "reelqueue_task_state_seconds_bucket",
                   "reelqueue_credit_spent_total", "reelqueue_webhook_lag_seconds_bucket",
                   "reelqueue_activities_in_flight", "reelqueue_import_credits", "reelqueue_import_wasted_credits",
                   "reelqueue_import_cost_per_video"):
        assert needle in text, needle


def test_every_alert_names_only_metrics_the_code_exports(exported: set[str]) -> None:
    rules = _alert_rules()
    assert len({r["alert"] for r in rules}) == len(rules)
    for rule in rules:
        assert set(rule) >= {"alert", "expr", "labels", "annotations"}, rule
        assert rule["labels"]["severity"] in ("info", "warning", "critical")
        assert _names(rule["expr"]) <= exported | PROMETHEUS_OWN, rule["alert"]
        assert re.fullmatch(r"\d+[smh]", rule.get("for", "0s")), rule["alert"]


def test_the_alerts_cover_the_capacity_metrics_of_seed_002() -> None:
    """Section 4.10.7's list, as far as the code exports a figure for it (alerts.yml says which not)."""
    text = " ".join(rule["expr"] for rule in _alert_rules())
    for metric in ("reelqueue_submits_total", "reelqueue_queue_oldest_age_seconds", "reelqueue_provider_active",
                   "reelqueue_provider_limit", "reelqueue_submit_unknown", "reelqueue_webhook_lag_seconds_bucket",
                   "reelqueue_status_calls_total", "reelqueue_fetch_backlog_oldest_age_seconds",
                   "reelqueue_media_utilisation", "reelqueue_transition_conflicts_total",
                   "reelqueue_reserved_credit_oldest_age_seconds"):
        assert metric in text, metric


def test_prometheus_loads_the_rules_and_grafana_the_dashboard() -> None:
    config = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
    assert config["rule_files"] == ["/etc/prometheus/alerts.yml"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["gateway"]["authorization"]["credentials_file"] == "/run/secrets/metrics_token"
    assert set(jobs["worker"]["dns_sd_configs"][0]["names"]) == {"worker-io", "worker-media"}
    provider = yaml.safe_load((MONITORING / "grafana/provisioning/dashboards/reelqueue.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    datasource = yaml.safe_load((MONITORING / "grafana/provisioning/datasources/prometheus.yml").read_text())
    assert datasource["datasources"][0]["uid"] == "prometheus"  # each panel's: tests/unit/test_dashboards.py
