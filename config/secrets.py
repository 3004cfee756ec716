"""Secrets: where they come from (files as Docker and Kubernetes mount them), which ones a process
needs, and the refusal to start with a missing, short or placeholder one (docs/security.md)."""

from __future__ import annotations

import base64
import os
import secrets
import string
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic_settings import PydanticBaseSettingsSource

MIN_BYTES = 32
# Values this repository has shipped or documented as examples: never accepted as a secret.
PLACEHOLDERS = frozenset({
    "reelqueue", "reelqueue-secret", "dev-review-secret-change-me", "emulator-dev-key", "secret", "password",
    "changeme", "change-me", "whsec_iPJ1vLkZmWtOxin0UzCXenzbwMwwagMlDg8rY2VEslM=",
})
_PLACEHOLDER_WORDS = ("change-me", "changeme", "change_me", "replace-me", "example", "placeholder", "xxxxxxxx")

# Fields holding a secret: read from REELQUEUE_<FIELD>_FILE or the secrets directory as well.
SECRET_FIELDS = (
    "media_link_secret", "media_link_secret_previous", "review_secret", "review_secret_previous",
    "emulator_webhook_secret", "s3_access_key", "s3_secret_key", "metrics_token", "database_url",
    "runway_api_key", "replicate_api_key", "replicate_webhook_secret", "kling_api_key", "kling_secret_key",
    "luma_api_key", "fal_api_key",
)
# What each long-running process refuses to start without (a signing key it needs, the S3 secret).
REQUIRED: dict[str, tuple[str, ...]] = {
    "gateway": ("media_link_secret", "review_secret", "s3_secret_key"),
    "worker": ("s3_secret_key",),
}
# Checked whenever set (an empty value turns the feature off).
CHECKED_WHEN_SET = ("media_link_secret_previous", "review_secret_previous", "emulator_webhook_secret",
                    "metrics_token")


class SecretError(ValueError):
    """A secret a process needs is missing or unusable; the message names the variable."""


def env_name(field: str) -> str:
    return "DATABASE_URL" if field == "database_url" else f"REELQUEUE_{field.upper()}"


def _secret_bytes(value: str) -> int:
    """Key material in a value: a Standard Webhooks `whsec_` secret counts its decoded bytes."""
    if value.startswith("whsec_"):
        try:
            return len(base64.b64decode(value.removeprefix("whsec_"), validate=True))
        except ValueError:
            return 0
    return len(value.encode())


def is_placeholder(value: str) -> bool:
    """A value shipped as an example, one saying "change me", or one of three characters repeated."""
    lowered = value.strip().lower()
    return (lowered in {p.lower() for p in PLACEHOLDERS} or any(word in lowered for word in _PLACEHOLDER_WORDS)
            or len(set(lowered)) < 4)


def problem(field: str, value: str) -> str | None:
    """Why `value` is not a usable secret for `field`, or None when it is."""
    name = env_name(field)
    if not value:
        return f"{name} is not set (or {name}_FILE, or a file {field} in REELQUEUE_SECRETS_DIR)"
    if is_placeholder(value):
        return f"{name} is a known placeholder; generate one (`reelqueue secrets init`)"
    if _secret_bytes(value) < MIN_BYTES:
        return f"{name} is shorter than {MIN_BYTES} bytes; generate one (`reelqueue secrets init`)"
    return None


def access_key_problem(value: str) -> str | None:
    """The S3 access key names the account: required, never a shipped placeholder (any length)."""
    if not value:
        return "REELQUEUE_S3_ACCESS_KEY is not set"
    return "REELQUEUE_S3_ACCESS_KEY is a known placeholder" if is_placeholder(value) else None


def database_password_problem(url: str) -> str | None:
    """A DATABASE_URL whose password is a known placeholder (a URL without one is left to the server)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        password = make_url(url).password
    except ArgumentError:
        return None
    if password and is_placeholder(str(password)):
        return "DATABASE_URL has a known placeholder password"
    return None


def problems(settings: Any, role: str) -> list[str]:
    """Everything wrong with the secrets `role` (gateway, worker) needs; empty when it may start."""
    found = [p for f in REQUIRED[role] if (p := problem(f, getattr(settings, f)))]
    if "s3_secret_key" in REQUIRED[role] and (p := access_key_problem(settings.s3_access_key)):
        found.append(p)
    found += [p for f in CHECKED_WHEN_SET if getattr(settings, f) and (p := problem(f, getattr(settings, f)))]
    db = database_password_problem(settings.database_url)
    return found + ([db] if db else [])


def require(settings: Any, role: str) -> None:
    """Exit 2 with one line per problem when `role` may not start with these settings."""
    found = problems(settings, role)
    if found:
        for line in found:
            print(f"reelqueue {role}: refusing to start: {line}", file=sys.stderr)
        sys.exit(2)


def new_secret() -> str:
    """256 random bits, URL-safe (43 characters)."""
    return secrets.token_urlsafe(MIN_BYTES)


def new_access_key() -> str:
    """An S3 access key id: 20 upper-case letters and digits, as AWS and MinIO spell them."""
    return "".join(secrets.choice(string.ascii_uppercase + string.digits) for _ in range(20))


def good_or_new(value: str, field: str = "", make: Callable[[], str] = new_secret) -> str:
    """`value` when it is a usable secret, else a fresh one from `make` (what `dev up` keeps in
    stack.json and `reelqueue secrets init` in .env)."""
    return value if value and problem(field or "secret", value) is None else make()


def access_key_or_new(value: str) -> str:
    """An S3 access key is an identifier, not a secret: kept unless empty or a known placeholder."""
    return value if value and not is_placeholder(value) else new_access_key()


class SecretFilesSource(PydanticBaseSettingsSource):
    """REELQUEUE_<FIELD>_FILE (DATABASE_URL_FILE), else the file named after the field (or its variable)
    in REELQUEUE_SECRETS_DIR: how Docker secrets and Kubernetes secret volumes hand them over."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        folder = os.environ.get("REELQUEUE_SECRETS_DIR", "")
        found: dict[str, Any] = {}
        for field in SECRET_FIELDS:
            path = os.environ.get(f"{env_name(field)}_FILE")
            if path and not Path(path).is_file():
                raise SecretError(f"{env_name(field)}_FILE names {path}, which is not a readable file")
            candidates = [Path(path)] if path else []
            if folder:
                candidates += [Path(folder) / field, Path(folder) / env_name(field)]
            for candidate in candidates:
                if candidate.is_file():
                    found[field] = candidate.read_text().strip()
                    break
        return found
