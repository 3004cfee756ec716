"""docker-compose.yml stays in step with Settings: same variable names, ports that line up; no
literal secret and nothing but the gateway, the Temporal UI and Grafana published, on loopback; every
long-running service has a healthcheck and a restart policy, every one-shot retries on failure, and
the scaled workers publish no host port (docs/deploy.md, "Docker Compose")."""

from __future__ import annotations

import re
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from sqlalchemy.engine import make_url

from cli.secrets import COMPOSE_SECRETS, init_env_file, read_env_file
from config.defaults import DEFAULT_TASK_QUEUE
from config.secrets import PLACEHOLDERS
from config.settings import Settings
from contracts import workflow_api as api
from devstack import SEARCH_ATTRIBUTES

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = {"postgres", "temporal-postgres", "temporal", "temporal-ui", "minio", "emulator", "gateway", "worker-io",
            "worker-media", "migrate", "prometheus", "grafana"}
WORKERS = {"worker-io": "io", "worker-media": "media"}  # scaled with --scale: no host port, no container name
# The Temporal client's own variables (temporalio.envconfig), besides Settings' REELQUEUE_* ones.
TEMPORAL_CLIENT_ENV = re.compile(r"TEMPORAL_(ADDRESS|NAMESPACE|API_KEY|PROFILE|CONFIG_FILE|TLS(_[A-Z_]+)?)")
LOCAL_HOSTS = {"localhost", "127.0.0.1"}
# Published only these, and only on loopback; never a database, S3, Temporal, emulator or metrics port.
PUBLISHED = {"gateway", "temporal-ui", "grafana"}
INTERNAL_PORTS = {5432: "Postgres", 9000: "S3", 9001: "MinIO console", 7233: "Temporal", 9464: "metrics",
                  8900: "emulator", 9090: "metrics"}
SECRET_NAME = re.compile(r"(SECRET|PASSWORD|_PWD|TOKEN|API_KEY|ACCESS_KEY|ROOT_USER)")
_REFERENCE = re.compile(r"\$\{([A-Z0-9_]+)(?::?([-?])([^}]*))?\}")


@pytest.fixture(scope="module")
def services() -> dict[str, dict[str, Any]]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]


def _app_services(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Our own services: the ones built from this repository."""
    return {name: svc for name, svc in services.items() if "build" in svc}


@lru_cache(maxsize=1)
def _dotenv() -> dict[str, str]:
    """What `make secrets` writes: the values compose substitutes for `${NAME:?...}`."""
    with tempfile.TemporaryDirectory() as folder:
        init_env_file(Path(folder) / ".env")
        return read_env_file(Path(folder) / ".env")


def _raw_env(svc: dict[str, Any]) -> dict[str, str]:
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def _interpolate(value: str, dotenv: dict[str, str]) -> str:
    """Compose's `${NAME}`, `${NAME:-default}`, `${NAME:?error}` against the env file."""
    def one(match: re.Match[str]) -> str:
        name, kind, rest = match.groups()
        if dotenv.get(name):
            return dotenv[name]
        assert kind != "?", f"{name} is required but .env has no value"
        return rest if kind == "-" else ""

    return _REFERENCE.sub(one, value)


def _env(svc: dict[str, Any]) -> dict[str, str]:
    return {k: _interpolate(v, _dotenv()) for k, v in _raw_env(svc).items()}


def _port_pairs(svc: dict[str, Any]) -> list[tuple[int | None, int]]:
    """(published host port or None, container port) for `ports` and `expose`."""
    pairs: list[tuple[int | None, int]] = []
    for entry in svc.get("ports") or []:
        if isinstance(entry, dict):
            pairs.append((int(entry["published"]), int(entry["target"])))
        else:
            parts = str(entry).split("/")[0].split(":")
            pairs.append((int(parts[-2]) if len(parts) > 1 else None, int(parts[-1])))
    pairs += [(None, int(str(p).split("/")[0])) for p in svc.get("expose") or []]
    return pairs


def _endpoints(env: dict[str, str]) -> list[tuple[str, str, int]]:
    """(variable, host, port) for every variable that points at a server."""
    found: list[tuple[str, str, int]] = []
    for key, value in env.items():
        if key in ("DATABASE_URL", "REELQUEUE_DATABASE_URL"):
            url = make_url(value)
            found.append((key, str(url.host), int(url.port or 5432)))
        elif key.endswith("_URL") and value:
            parts = urlsplit(value)
            default = 443 if parts.scheme == "https" else 80
            found.append((key, str(parts.hostname), parts.port or default))
        elif key in ("TEMPORAL_ADDRESS", "REELQUEUE_S3_ENDPOINT"):
            host, _, port = value.rpartition(":")
            found.append((key, host, int(port)))
    return found


def test_required_services_exist_with_an_image_or_build(services: dict[str, dict[str, Any]]) -> None:
    assert set(services) >= REQUIRED
    for name, svc in services.items():
        assert "image" in svc or "build" in svc, name
    assert {"emulator", "gateway", "migrate", "temporal-setup", *WORKERS} <= set(_app_services(services))


def test_app_images_build_from_the_repo_dockerfile(services: dict[str, dict[str, Any]]) -> None:
    for name, svc in _app_services(services).items():
        build = svc["build"]
        context = ROOT / (build if isinstance(build, str) else build.get("context", "."))
        dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
        assert (context / dockerfile).is_file(), name
        assert (context / "pyproject.toml").is_file(), name


def test_app_env_names_are_settings_fields(services: dict[str, dict[str, Any]]) -> None:
    for name, svc in _app_services(services).items():
        env = _env(svc)
        assert env, f"{name} has no environment"
        for key in env:
            if key == "DATABASE_URL" or TEMPORAL_CLIENT_ENV.fullmatch(key):
                continue
            match = re.fullmatch(r"REELQUEUE_([A-Z0-9_]+)", key)
            assert match and match.group(1).lower() in Settings.model_fields, f"{name}: {key}"


def test_app_env_values_parse_as_settings(
    services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    for svc in _app_services(services).values():
        with monkeypatch.context() as patch:
            for key, value in _env(svc).items():
                patch.setenv(key, value)
            settings = Settings()
        env = _env(svc)
        assert settings.database_url == env["DATABASE_URL"]
        assert settings.s3_endpoint == env["REELQUEUE_S3_ENDPOINT"]
        for entry in settings.fetch_allowed_hosts:  # host or host:port of a compose service
            assert (entry.rpartition(":")[0] or entry) in services, entry


def test_endpoints_point_at_published_ports(services: dict[str, dict[str, Any]]) -> None:
    host_ports = {host for svc in services.values() for host, _ in _port_pairs(svc) if host is not None}
    for name, svc in _app_services(services).items():
        for key, host, port in _endpoints(_env(svc)):
            if host in LOCAL_HOSTS:  # links shown to a person on the docker host
                assert port in host_ports, f"{name}: {key} -> {host}:{port} is not published"
            else:
                assert host in services, f"{name}: {key} -> unknown service {host}"
                targets = {target for _, target in _port_pairs(services[host])}
                assert port in targets, f"{name}: {key} -> {host}:{port}, but {host} serves {targets}"


def _options(command: list[Any]) -> dict[str, str]:
    """--name value and --name=value pairs of a command list."""
    parts = [str(p) for p in command]
    found: dict[str, str] = {}
    for i, part in enumerate(parts):
        if part.startswith("--"):
            name, eq, value = part.partition("=")
            found[name] = value if eq else (parts[i + 1] if i + 1 < len(parts) else "")
    return found


def test_app_servers_listen_on_their_published_port(services: dict[str, dict[str, Any]]) -> None:
    for name in ("emulator", "gateway"):
        options = _options(services[name]["command"])
        assert int(options["--port"]) in {target for _, target in _port_pairs(services[name])}, name
        assert options["--host"] == "0.0.0.0", name


def test_emulator_hands_out_urls_the_worker_can_fetch(services: dict[str, dict[str, Any]]) -> None:
    public = _options(services["emulator"]["command"])["--public-url"]
    worker_env = _env(services["worker-media"])  # the media queue fetches outputs
    assert public.rstrip("/") == worker_env["REELQUEUE_EMULATOR_URL"].rstrip("/")
    with pytest.MonkeyPatch.context() as patch:
        for key, value in worker_env.items():
            patch.setenv(key, value)
        assert urlsplit(public).netloc in Settings().allowed_fetch_hosts()
        assert urlsplit(public).netloc in Settings().fetch_http_hosts  # outputs are plain http there


def test_depends_on_references_exist(services: dict[str, dict[str, Any]]) -> None:
    for name, svc in services.items():
        for dep in svc.get("depends_on") or []:
            assert dep in services, f"{name} depends on missing {dep}"
            assert dep != name


def test_search_attributes_are_registered_by_the_setup_command_before_anything_starts_workflows(services) -> None:
    """`reelqueue temporal setup` registers devstack.SEARCH_ATTRIBUTES, after the namespace exists."""
    setup = services["temporal-setup"]
    assert setup["command"] == ["reelqueue", "temporal", "setup"]
    assert setup["depends_on"]["temporal-namespace"] == {"condition": "service_completed_successfully"}
    for name in ("gateway", *WORKERS):
        assert services[name]["depends_on"]["temporal-setup"] == {"condition": "service_completed_successfully"}


def test_dev_stack_registers_what_the_workflows_upsert() -> None:
    keys = pytest.importorskip("workflows.search_attributes")
    assert {key.name for key in keys.ALL} == set(SEARCH_ATTRIBUTES)
    assert all(kind == "Keyword" for kind in SEARCH_ATTRIBUTES.values())


def test_no_secret_is_written_in_the_compose_file(services: dict[str, dict[str, Any]]) -> None:
    """Every secret-named variable is a required reference to the env file (a default would ship it)."""
    text = (ROOT / "docker-compose.yml").read_text()
    for placeholder in (p for p in PLACEHOLDERS if len(p) > 12):  # the ones this file used to ship
        assert placeholder not in text, placeholder
    for name, svc in services.items():
        for key, value in _raw_env(svc).items():
            if key == "DATABASE_URL":
                password = make_url(value).password
                assert password and _REFERENCE.fullmatch(str(password)), f"{name}: {key} has a literal password"
            elif SECRET_NAME.search(key) and not key.endswith("_PREVIOUS") and "PROVIDER" not in key:
                match = _REFERENCE.fullmatch(value)
                assert match, f"{name}: {key} is a literal ({value[:4]}...)"
                assert match.group(2) == "?" or not match.group(3), f"{name}: {key} has a default value"
        for part in map(str, (svc.get("command") or [])[1:]):  # after the program (`reelqueue` is one)
            for placeholder in PLACEHOLDERS:
                assert placeholder not in part.split(), f"{name}: a literal secret in its command"


def test_the_secrets_compose_requires_are_the_ones_make_secrets_writes() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    required = {m.group(1) for m in _REFERENCE.finditer(text) if m.group(2) == "?"}
    assert required == set(COMPOSE_SECRETS)
    example = read_env_file(ROOT / ".env.example")
    assert set(example) >= {m.group(1) for m in _REFERENCE.finditer(text)}
    assert not any(example.values()), ".env.example holds a value"
    assert ".env" in (ROOT / ".gitignore").read_text().split()
    assert ".env" in (ROOT / "docker" / "Dockerfile.dockerignore").read_text().split()
    from config.secrets import problem

    for name in COMPOSE_SECRETS:
        if name != "REELQUEUE_S3_ACCESS_KEY":
            assert problem(name.removeprefix("REELQUEUE_").lower(), _dotenv()[name]) is None, name


def _published(entry: Any) -> tuple[str, int | None, int]:
    """(host ip, host port, container port) of one `ports` entry."""
    if isinstance(entry, dict):
        return str(entry.get("host_ip", "")), int(entry["published"]) if entry.get("published") else None, \
            int(entry["target"])
    parts = str(entry).split("/")[0].split(":")
    ip = parts[0] if len(parts) == 3 else ""
    return ip, int(parts[-2]) if len(parts) > 1 else None, int(parts[-1])


def test_only_the_gateway_the_temporal_ui_and_grafana_are_published_on_loopback(services) -> None:
    for name, svc in services.items():
        for entry in svc.get("ports") or []:
            ip, host_port, target = _published(entry)
            assert name in PUBLISHED, f"{name} publishes {entry}"
            assert ip == "127.0.0.1", f"{name} publishes {entry} on every interface"
            for port in (host_port, target):
                assert port not in INTERNAL_PORTS, f"{name} publishes a {INTERNAL_PORTS.get(port)} port"
    assert services["gateway"]["command"][:3] == ["python", "-m", "gateway"]  # checks its secrets (exit 2)


def test_the_worker_metrics_stay_on_the_compose_network(services) -> None:
    for name in WORKERS:
        worker = services[name]
        assert int(_env(worker)["REELQUEUE_WORKER_METRICS_PORT"]) in {t for _, t in _port_pairs(worker)}
        assert _env(worker)["REELQUEUE_WORKER_METRICS_HOST"] == "0.0.0.0"


def _one_shots(services: dict[str, dict[str, Any]]) -> set[str]:
    """Services others wait for to have exited 0: jobs, not servers."""
    return {dep for svc in services.values() for dep, rule in _depends(svc).items()
            if rule.get("condition") == "service_completed_successfully"}


def _depends(svc: dict[str, Any]) -> dict[str, dict[str, str]]:
    deps = svc.get("depends_on") or {}
    return {name: {"condition": "service_started"} for name in deps} if isinstance(deps, list) else deps


def test_every_server_has_a_healthcheck_and_restarts_and_every_job_retries(services) -> None:
    jobs = _one_shots(services)
    assert jobs >= {"migrate", "temporal-schema", "temporal-namespace", "temporal-setup", "minio-bucket"}
    for name, svc in services.items():
        if name in jobs:
            assert re.fullmatch(r"on-failure(:\d+)?", str(svc.get("restart"))), f"{name}: a job retries on failure"
            assert "healthcheck" not in svc and not svc.get("ports"), f"{name}: a job serves nothing"
            continue
        assert svc.get("restart") in ("unless-stopped", "always"), f"{name} has no restart policy"
        check = svc.get("healthcheck") or {}
        assert not check.get("disable") and check.get("test"), f"{name} has no healthcheck"
        assert check["test"][0] in ("CMD", "CMD-SHELL") and len(check["test"]) > 1, name


def test_waits_are_on_health_for_servers_and_on_completion_for_jobs(services) -> None:
    jobs = _one_shots(services)
    for name, svc in services.items():
        for dep, rule in _depends(svc).items():
            wanted = "service_completed_successfully" if dep in jobs else "service_healthy"
            assert rule.get("condition") == wanted, f"{name} -> {dep}: {rule}"


def test_scaled_workers_publish_no_host_port_and_serve_one_queue_each(services) -> None:
    for name, queue in WORKERS.items():
        svc = services[name]
        assert not svc.get("ports") and "container_name" not in svc, f"{name} cannot be scaled"
        assert svc["command"] == ["python", "worker.py", "--queues", queue]
        assert int(str(svc["stop_grace_period"]).rstrip("s")) >= 60, f"{name}: SIGTERM needs time to drain"
    for name in PUBLISHED:
        assert name not in WORKERS


def test_temporal_runs_the_server_image_on_its_own_database_and_user(services) -> None:
    temporal, ledger = services["temporal"], services["postgres"]
    assert temporal["image"].startswith("temporalio/server:")
    assert not any("auto-setup" in str(svc.get("image", "")) for svc in services.values())
    env = temporal["environment"]
    assert env["POSTGRES_SEEDS"] == "temporal-postgres" != "postgres"
    assert env["POSTGRES_USER"] == services["temporal-postgres"]["environment"]["POSTGRES_USER"] != \
        ledger["environment"]["POSTGRES_USER"]
    assert env["POSTGRES_PWD"] != ledger["environment"]["POSTGRES_PASSWORD"]
    schema = services["temporal-schema"]
    assert schema["image"].startswith("temporalio/admin-tools:") and "update-schema" in schema["command"][0]
    assert _depends(temporal)["temporal-schema"]["condition"] == "service_completed_successfully"
    namespace = services["temporal-namespace"]
    assert namespace["image"].startswith("temporalio/admin-tools:") and "namespace create" in namespace["command"][0]


def test_temporal_dispatches_the_media_queue_by_priority_from_one_partition(services) -> None:
    """fetch_output's priority keys (soonest-expiring output URL first) need the priority matcher and,
    for a strict order, one partition on the media queue the workers of this file serve."""
    temporal = services["temporal"]
    path = temporal["environment"]["DYNAMIC_CONFIG_FILE_PATH"]
    mounts = {target: source for source, target, *_ in (v.split(":") for v in temporal["volumes"])}
    config = yaml.safe_load((ROOT / mounts[path]).read_text())
    assert config["matching.useNewMatcher"] == [{"value": True}]
    queues = {_env(svc).get("REELQUEUE_TASK_QUEUE", DEFAULT_TASK_QUEUE) for svc in _app_services(services).values()}
    media = {api.media_queue(queue) for queue in queues}
    for name in ("matching.numTaskqueueReadPartitions", "matching.numTaskqueueWritePartitions"):
        assert {entry["constraints"]["taskQueueName"] for entry in config[name] if entry["value"] == 1} == media


def test_the_ledger_migrates_in_its_own_job_before_the_gateway_and_workers(services) -> None:
    assert services["migrate"]["command"] == ["reelqueue", "db", "upgrade"]
    assert _depends(services["migrate"]) == {"postgres": {"condition": "service_healthy"}}
    for name in ("gateway", *WORKERS):
        assert _depends(services[name])["migrate"]["condition"] == "service_completed_successfully"


def test_public_url_is_the_base_of_webhooks_and_video_links_and_the_emulator_posts_inside(
    services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hosted providers and browsers get REELQUEUE_PUBLIC_URL; the emulator, on the compose network,
    the gateway's service name (it cannot reach localhost:8000 of the docker host)."""
    from delivery.links import LinkSigner

    env = _env(services["worker-io"])
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("REELQUEUE_PUBLIC_URL", "https://reels.example")
    settings = Settings()
    assert settings.webhook_url("runway") == "https://reels.example/webhooks/runway"
    assert settings.webhook_url("emulator") == "http://gateway:8000/webhooks/emulator"
    assert LinkSigner.from_settings(settings).link("a/b/proxy.mp4", 60).url.startswith("https://reels.example/media/")
    monkeypatch.setenv("REELQUEUE_EMULATE_PROVIDERS", "true")  # every provider without a base URL is the emulator
    assert Settings().webhook_url("runway") == "http://gateway:8000/webhooks/runway"
    default = urlsplit(env["REELQUEUE_PUBLIC_URL"])  # without one: the gateway as published on this host
    assert default.hostname in LOCAL_HOSTS and default.port == _published(services["gateway"]["ports"][0])[1]


def test_monitoring_runs_only_in_its_profile_with_files_from_the_repo(services) -> None:
    for name in ("prometheus", "grafana"):
        assert services[name]["profiles"] == ["monitoring"]
        for volume in services[name]["volumes"]:
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), f"{name} mounts missing {source}"
    assert "metrics_token" in services["prometheus"]["secrets"]


def test_minio_answers_cors_for_the_public_url_only(services) -> None:
    """MinIO keeps no per-bucket CORS rules: its server-wide origin list is the gateway's public URL
    (its default is any origin), which the studio page's presigned uploads come from."""
    env = services["minio"]["environment"]
    assert env["MINIO_API_CORS_ALLOW_ORIGIN"] == "${REELQUEUE_PUBLIC_URL:-http://localhost:8000}"
