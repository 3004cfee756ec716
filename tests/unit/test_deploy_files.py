"""The monitoring files (deploy/monitoring/), checked statically: no Docker, Prometheus or Grafana runs
here (docs/deploy.md); the Kubernetes manifests are tests/unit/test_kubernetes.py's."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
NOWHERE_DB = "postgresql+psycopg://nobody@127.0.0.1:1/nothing?connect_timeout=2"
# Series Prometheus makes itself, not the code.
PROMETHEUS_OWN = {"up"}
_METRIC = re.compile(r"\b((?:reelqueue|temporal)_[a-z0-9_]+|up)\b(?!\s*\()")
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
    dashboard = json.loads((MONITORING / "grafana" / "dashboards" / "reelqueue.json").read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]


@pytest.fixture(scope="module")
def exported() -> set[str]:
    return _exported()


def _names(expr: str) -> set[str]:
    found = {m.group(1) for m in _METRIC.finditer(expr)}
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


def test_no_two_dashboard_panels_overlap() -> None:
    """Panels added by different branches keep their own cells (Grafana would shuffle overlaps)."""
    dashboard = json.loads((MONITORING / "grafana" / "dashboards" / "reelqueue.json").read_text())
    taken: dict[tuple[int, int], str] = {}
    for panel in dashboard["panels"]:
        g = panel["gridPos"]
        for cell in ((x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])):
            assert cell not in taken, (panel["title"], taken[cell])
            taken[cell] = panel["title"]
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


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
    uid = datasource["datasources"][0]["uid"]
    dashboard = json.loads((MONITORING / "grafana" / "dashboards" / "reelqueue.json").read_text())
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == uid and panel["targets"], panel["title"]


def _database_gauges() -> set[str]:
    """The gauges the gateway reads from Postgres: every gateway replica reports the same values."""
    from metrics.collector import PostgresCollector, snapshot_metrics
    from schema.db import Database

    families = [*snapshot_metrics([], {}, ["emulator"]), *PostgresCollector(Database(NOWHERE_DB), {}, []).collect()]
    return {family.name for family in families}


def test_no_database_gauge_is_summed_over_gateway_replicas() -> None:
    """Two gateways report the same queue depth: summing it doubles it. Take it with max (then sum
    over a label of its own, such as the providers of a status, if the panel wants that)."""
    gauges = _database_gauges()
    assert {"reelqueue_queue_depth", "reelqueue_tasks", "reelqueue_reserved_credit"} <= gauges
    names = "|".join(sorted(gauges, key=len, reverse=True))
    summed = re.compile(rf"\b(sum|count)\s*(by\s*\([^)]*\))?\s*\(\s*({names})\b")
    for expr in [rule["expr"] for rule in _alert_rules()] + _dashboard_queries():
        assert not summed.search(expr), expr
