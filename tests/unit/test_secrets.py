"""Secrets: no usable default, refused when missing, short or a placeholder; read from files; the
gateway and the worker exit 2 naming the variable (docs/security.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from config import secrets
from config.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
GOOD = "k" * 8 + "Q7v2xLp9Rz4TsW8yBn3Mc6Hd1Fg5Jq0Ae"


@pytest.fixture
def bare_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """No REELQUEUE_* variable and an empty home: what a process sees outside `dev up`."""
    for key in list(os.environ):
        if key.startswith("REELQUEUE_") or key.startswith("DATABASE_URL"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("REELQUEUE_HOME", str(tmp_path / "home"))
    return {k: v for k, v in os.environ.items()}


def test_no_secret_has_a_default(bare_env):
    settings = Settings()
    for field in ("media_link_secret", "review_secret", "s3_secret_key", "s3_access_key",
                  "emulator_webhook_secret", "metrics_token"):
        assert getattr(settings, field) == "", field
    assert secrets.problems(settings, "gateway") == [
        secrets.problem("media_link_secret", ""), secrets.problem("review_secret", ""),
        secrets.problem("s3_secret_key", ""), "REELQUEUE_S3_ACCESS_KEY is not set"]
    assert secrets.problems(settings.model_copy(update={"s3_secret_key": GOOD, "s3_access_key": "reelqueue"}),
                            "worker") == ["REELQUEUE_S3_ACCESS_KEY is a known placeholder"]


@pytest.mark.parametrize("value, why", [
    ("", "is not set"), ("reelqueue-secret", "placeholder"), ("dev-review-secret-change-me", "placeholder"),
    ("whsec_iPJ1vLkZmWtOxin0UzCXenzbwMwwagMlDg8rY2VEslM=", "placeholder"), ("a" * 64, "placeholder"),
    ("Zx81-short-but-random", "shorter than 32 bytes"), ("whsec_" + "QUJD" * 4, "shorter than 32 bytes"),
])
def test_unusable_secrets_are_named_with_the_reason(value, why):
    found = secrets.problem("review_secret", value)
    assert found is not None and found.startswith("REELQUEUE_REVIEW_SECRET ") and why in found


def test_random_secrets_pass():
    assert secrets.problem("review_secret", secrets.new_secret()) is None
    from emulator.config import new_webhook_secret

    assert secrets.problem("emulator_webhook_secret", new_webhook_secret()) is None
    assert secrets.good_or_new("reelqueue-secret") != "reelqueue-secret"
    assert secrets.good_or_new(GOOD) == GOOD


def test_a_placeholder_database_password_is_refused(bare_env):
    settings = Settings(media_link_secret=GOOD, review_secret=GOOD, s3_secret_key=GOOD, s3_access_key="AK7Q2M9X",
                        database_url="postgresql+psycopg://reelqueue:reelqueue@postgres:5432/reelqueue")
    assert secrets.problems(settings, "worker") == ["DATABASE_URL has a known placeholder password"]


def test_optional_secrets_are_checked_when_set(bare_env):
    settings = Settings(media_link_secret=GOOD, review_secret=GOOD, s3_secret_key=GOOD, s3_access_key="AK7Q2M9X",
                        metrics_token="short")
    assert secrets.problems(settings, "gateway") == [secrets.problem("metrics_token", "short")]


def test_secrets_come_from_file_variables_and_a_secrets_directory(bare_env, tmp_path, monkeypatch):
    one = tmp_path / "review"
    one.write_text(GOOD + "\n")
    folder = tmp_path / "run-secrets"
    folder.mkdir()
    (folder / "media_link_secret").write_text("m" + GOOD)
    (folder / "REELQUEUE_S3_SECRET_KEY").write_text("s" + GOOD)
    monkeypatch.setenv("REELQUEUE_REVIEW_SECRET_FILE", str(one))
    monkeypatch.setenv("REELQUEUE_SECRETS_DIR", str(folder))
    settings = Settings()
    assert (settings.review_secret, settings.media_link_secret, settings.s3_secret_key) == (
        GOOD, "m" + GOOD, "s" + GOOD)
    monkeypatch.setenv("REELQUEUE_S3_SECRET_KEY", "e" + GOOD)  # a variable wins over a file
    assert Settings().s3_secret_key == "e" + GOOD
    monkeypatch.setenv("REELQUEUE_MEDIA_LINK_SECRET_FILE", str(tmp_path / "missing"))
    with pytest.raises(secrets.SecretError, match="REELQUEUE_MEDIA_LINK_SECRET_FILE"):
        Settings()


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args, variable", [
    (["worker.py"], "REELQUEUE_S3_SECRET_KEY"),
    (["-m", "worker"], "REELQUEUE_S3_SECRET_KEY"),
    (["-m", "gateway", "--port", "1"], "REELQUEUE_MEDIA_LINK_SECRET"),
])
def test_gateway_and_worker_refuse_to_start_without_secrets(bare_env, args, variable):
    done = _run(args, bare_env)
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"refusing to start: {variable} is not set" in done.stderr


@pytest.mark.parametrize("args", [["worker.py"], ["-m", "gateway", "--port", "1"]])
def test_gateway_and_worker_refuse_a_placeholder(bare_env, args):
    env = {**bare_env, "REELQUEUE_MEDIA_LINK_SECRET": GOOD, "REELQUEUE_REVIEW_SECRET": GOOD,
           "REELQUEUE_S3_SECRET_KEY": "reelqueue-secret"}
    done = _run(args, env)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "REELQUEUE_S3_SECRET_KEY is a known placeholder" in done.stderr


def test_secrets_init_writes_random_values_owner_only_and_keeps_usable_ones(tmp_path):
    from typer.testing import CliRunner

    from cli.secrets import COMPOSE_SECRETS, read_env_file
    from starter import app

    env_file = tmp_path / ".env"
    env_file.write_text(f"# mine\nREELQUEUE_PUBLIC_URL=https://x.example\nREELQUEUE_REVIEW_SECRET={GOOD}\n"
                        "REELQUEUE_S3_SECRET_KEY=reelqueue-secret\n")
    done = CliRunner().invoke(app, ["secrets", "init", "--env-file", str(env_file), "--json"])
    assert done.exit_code == 0, done.output
    values = read_env_file(env_file)
    assert values["REELQUEUE_REVIEW_SECRET"] == GOOD and values["REELQUEUE_PUBLIC_URL"] == "https://x.example"
    assert values["REELQUEUE_S3_SECRET_KEY"] != "reelqueue-secret"
    for name in COMPOSE_SECRETS:
        if name != "REELQUEUE_S3_ACCESS_KEY":
            assert secrets.problem(name.removeprefix("REELQUEUE_").lower(), values[name]) is None, name
    assert env_file.stat().st_mode & 0o777 == 0o600
    again = CliRunner().invoke(app, ["secrets", "init", "--env-file", str(env_file), "--json"])
    assert '"generated": []' in again.output and read_env_file(env_file) == values


def test_secrets_init_for_kubernetes_fills_the_secret_s_random_keys_only(tmp_path):
    """On the Kubernetes Secret's file it adds no compose-only password (POSTGRES, TEMPORAL_DB,
    GRAFANA: the cluster runs none of them) and leaves the S3 keys for the S3 service to issue."""
    from typer.testing import CliRunner

    from cli.secrets import KUBERNETES_SECRETS, read_env_file
    from starter import app

    example = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "base" / "secrets.example.env"
    env_file = tmp_path / "secrets.env"
    env_file.write_text(example.read_text())
    done = CliRunner().invoke(app, ["secrets", "init", "--env-file", str(env_file), "--target", "kubernetes",
                                    "--json"])
    assert done.exit_code == 0, done.output
    values = read_env_file(env_file)
    assert set(values) == set(read_env_file(example)), "a key the Secret does not have"
    assert {name for name, value in values.items() if value} == set(KUBERNETES_SECRETS)
    for name in KUBERNETES_SECRETS:
        if name != "REELQUEUE_EMULATOR_WEBHOOK_SECRET":
            assert secrets.problem(name.removeprefix("REELQUEUE_").lower(), values[name]) is None, name
    assert env_file.stat().st_mode & 0o777 == 0o600


def test_the_cli_names_the_missing_media_link_secret(bare_env, monkeypatch, capsys):
    import starter
    from delivery.links import LinkSigner

    monkeypatch.setattr(starter, "app", lambda: LinkSigner.from_settings(Settings()).link("t/k/a.mp4", 60))
    with pytest.raises(SystemExit) as exited:  # `_run`, not `main`: main's exit hook would end pytest with 1
        starter._run()
    assert exited.value.code == 1 and "REELQUEUE_MEDIA_LINK_SECRET is not set" in capsys.readouterr().err


def test_uvicorn_serving_the_app_directly_refuses_too(bare_env, monkeypatch):
    """`uvicorn gateway.app:app` (no `python -m gateway`): the app's start-up fails, naming the variable."""
    from fastapi.testclient import TestClient

    from gateway.app import create_app

    with pytest.raises(RuntimeError, match="REELQUEUE_MEDIA_LINK_SECRET is not set"), \
            TestClient(create_app(require_secrets=True)):
        pass
    for key in ("REELQUEUE_MEDIA_LINK_SECRET", "REELQUEUE_REVIEW_SECRET", "REELQUEUE_S3_SECRET_KEY"):
        monkeypatch.setenv(key, GOOD)
    monkeypatch.setenv("REELQUEUE_S3_ACCESS_KEY", "AK7Q2M9X")
    with TestClient(create_app(require_secrets=True)) as http:
        assert http.get("/healthz").status_code == 200
