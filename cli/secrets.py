"""`reelqueue secrets init`: the env file docker-compose (or the Kubernetes Secret) reads its secrets
from, made at random."""

from __future__ import annotations

import os
import re
from enum import StrEnum
from pathlib import Path

import typer

from cli.output import console, emit_json
from config.secrets import access_key_or_new, good_or_new
from emulator.config import new_webhook_secret

secrets_app = typer.Typer(help="Secrets for docker-compose (and any deployment reading an env file).",
                          no_args_is_help=True)

# What docker-compose.yml needs, in the order .env.example lists them.
COMPOSE_SECRETS = (
    "POSTGRES_PASSWORD", "REELQUEUE_S3_ACCESS_KEY", "REELQUEUE_S3_SECRET_KEY", "REELQUEUE_MEDIA_LINK_SECRET",
    "REELQUEUE_REVIEW_SECRET", "REELQUEUE_EMULATOR_WEBHOOK_SECRET", "REELQUEUE_METRICS_TOKEN",
    "TEMPORAL_DB_PASSWORD", "GRAFANA_ADMIN_PASSWORD",
)
# What deploy/kubernetes/base/secrets.example.env lists that can be made at random: no database or
# Grafana passwords (the cluster runs neither), no S3 keys (the S3 service issues them).
KUBERNETES_SECRETS = (
    "REELQUEUE_MEDIA_LINK_SECRET", "REELQUEUE_REVIEW_SECRET", "REELQUEUE_METRICS_TOKEN",
    "REELQUEUE_EMULATOR_WEBHOOK_SECRET",
)


class Target(StrEnum):
    """Which deployment the env file is for: it decides which secrets are made."""

    compose = "compose"
    kubernetes = "kubernetes"


TARGET_SECRETS = {Target.compose: COMPOSE_SECRETS, Target.kubernetes: KUBERNETES_SECRETS}
_LINE = re.compile(r"^\s*([A-Z0-9_]+)\s*=\s*(.*?)\s*$")


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=value lines (comments and blank lines skipped)."""
    if not path.exists():
        return {}
    return {m.group(1): m.group(2) for line in path.read_text().splitlines() if (m := _LINE.match(line))}


def fresh_value(name: str, current: str) -> str:
    """`current` when usable, else a random value of the right shape for `name`."""
    if name == "REELQUEUE_S3_ACCESS_KEY":
        return access_key_or_new(current)
    if name == "REELQUEUE_EMULATOR_WEBHOOK_SECRET":
        return good_or_new(current, "emulator_webhook_secret", new_webhook_secret)
    return good_or_new(current)


def init_env_file(path: Path, names: tuple[str, ...] = COMPOSE_SECRETS) -> list[str]:
    """Fill `path` with the secrets `names` (every compose secret by default), keeping usable values
    already there; owner-only (0600). Returns the names it (re)generated."""
    existing = read_env_file(path)
    values = {name: fresh_value(name, existing.get(name, "")) for name in names}
    made = [name for name in names if values[name] != existing.get(name)]
    others = [line for line in (path.read_text().splitlines() if path.exists() else [])
              if not ((m := _LINE.match(line)) and m.group(1) in values)]
    text = "\n".join([*others, *(f"{name}={values[name]}" for name in names)]) + "\n"
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
        out.write(text)
    os.replace(tmp, path)
    return made


@secrets_app.command("init")
def init(
    env_file: Path = typer.Option(Path(".env"), "--env-file", help="the file docker compose reads"),
    target: Target = typer.Option(Target.compose, "--target", help="compose: every secret docker-compose.yml "
                                  "reads; kubernetes: only those of the Secret reelqueue-secrets made at random"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Write random secrets into the env file (mode 0600); values already usable are kept. With
    --target kubernetes, no compose-only password and no S3 key (the S3 service issues those)."""
    made = init_env_file(env_file, TARGET_SECRETS[target])
    if as_json:
        emit_json({"env_file": str(env_file), "generated": made})
        return
    console.print(f"{env_file}: {len(made)} secret(s) generated" + (f" ({', '.join(made)})" if made else "")
                  + "; keep this file out of version control")
