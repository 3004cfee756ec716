"""Connecting to Temporal: every client (worker, CLI, gateway, tests) connects here, with the
pydantic converter and the connection the settings and the `temporalio.envconfig` profile describe."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.envconfig import ClientConfigProfile

if TYPE_CHECKING:
    from config.settings import Settings

# Settings that, when set (environment, secret file or stack.json), win over the profile.
_OVERRIDES = {"temporal_address": "target_host", "temporal_namespace": "namespace"}
CLOUD_HOST_SUFFIXES = (".tmprl.cloud", ".api.temporal.io")
log = logging.getLogger(__name__)


class TemporalConfigError(ValueError):
    """The profile cannot be loaded (a missing file or profile, an unreadable certificate)."""


def connect_options(settings: Settings) -> dict[str, Any]:
    """`Client.connect` keyword arguments: the envconfig profile (TOML file and `TEMPORAL_*`
    variables, docs/deploy.md), then REELQUEUE_TEMPORAL_ADDRESS / _NAMESPACE where they are set,
    then their defaults. With `temporal_envconfig` off (the stack `dev up` starts) no profile is read."""
    options = profile_options() if settings.temporal_envconfig else {}
    for field, key in _OVERRIDES.items():
        if field in settings.model_fields_set or key not in options:
            options[key] = getattr(settings, field)
    return options


def namespace_of(settings: Settings) -> str:
    """The namespace this process connects to (the profile's TEMPORAL_NAMESPACE, else the setting):
    the one to name in Temporal UI links."""
    return str(connect_options(settings)["namespace"])


def profile_options() -> dict[str, Any]:
    """The profile named by TEMPORAL_PROFILE (else "default") with the `TEMPORAL_*` overrides, as
    `Client.connect` arguments (certificates read from their files).

    The SDK treats a TEMPORAL_CONFIG_FILE that does not exist as an empty file, which would send a
    production worker to 127.0.0.1 quietly: here it is an error. And it reads an empty variable as a
    value (an empty TEMPORAL_API_KEY switches TLS on): here an empty `TEMPORAL_*` is unset, as a
    Secret or env file listing an optional key without a value means."""
    env = {key: value for key, value in os.environ.items() if value or not key.startswith("TEMPORAL_")}
    path = env.get("TEMPORAL_CONFIG_FILE")
    if path and not Path(path).is_file():
        raise TemporalConfigError(f"TEMPORAL_CONFIG_FILE={path}: no such file")
    try:
        return dict(ClientConfigProfile.load(override_env_vars=env).to_client_connect_config())
    except Exception as exc:  # the SDK's loader raises its own ConfigError, OSError for a certificate
        raise TemporalConfigError(f"Temporal client profile: {exc}") from exc


def is_temporal_cloud(address: str) -> bool:
    """Whether `address` (host:port, or a TLS server name) is a Temporal Cloud endpoint (namespace
    or regional, mTLS or API key)."""
    host = address.rsplit(":", 1)[0].lower() if ":" in address else address.lower()
    return host.endswith(CLOUD_HOST_SUFFIXES)


async def connect(settings: Settings, *, wait_s: float = 0.0) -> Client:
    """With tracing on (telemetry/tracing.py), the client and the workers built on it carry its interceptor.

    `wait_s`: keep trying that long while the server does not answer yet (a worker or a one-shot
    job started together with Temporal, or while it restarts), each failure logged; then the
    SDK's "Failed client connect" error."""
    from telemetry import core_logs
    from telemetry.tracing import client_interceptors

    core_logs.default_runtime()  # the core's warnings to stderr, not into a command's stdout
    deadline, pause = time.monotonic() + wait_s, 0.5
    while True:
        try:
            return await Client.connect(**connect_options(settings), data_converter=pydantic_data_converter,
                                        interceptors=client_interceptors())
        except RuntimeError as exc:  # the SDK's "Failed client connect: ..."
            if "connect" not in str(exc).lower() or time.monotonic() + pause > deadline:
                raise
            log.warning("Temporal at %s does not answer yet (%s); trying again in %.1f s",
                        settings.temporal_address, str(exc).splitlines()[0][:200], pause)
            await asyncio.sleep(pause)
            pause = min(pause * 2, 5.0)
