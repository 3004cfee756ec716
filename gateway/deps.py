"""What the gateway's routes need, built from Settings on first use (or given by a test).

Nothing connects at start-up: /healthz answers without Postgres or Temporal, the database engine
connects on the first webhook, the Temporal client on the first signal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from fastapi import Request

from adapters.providers.base import VideoProvider
from config.settings import Settings
from schema.admission import ProviderLimits
from schema.contracts import ProviderUpdate
from schema.db import Database


class Signaler(Protocol):
    async def signal(self, workflow_id: str, update: ProviderUpdate, request_id: str) -> bool:
        """True once delivered, False for a closed or missing workflow; SignalUnavailable otherwise."""


@dataclass
class GatewayDeps:
    db: Database
    providers: Mapping[str, VideoProvider]  # the worker's adapters; those with parse_webhook receive
    signaler: Signaler
    max_body_bytes: int = 256 * 1024
    orphan_ttl_s: float = 3600.0
    next_sweep: float = 0.0  # monotonic time of the next orphan expiry sweep
    provider_limits: Mapping[str, ProviderLimits] = field(default_factory=dict)  # configured: /metrics shows them


def deps_from_settings(settings: Settings) -> GatewayDeps:
    """The production wiring: the worker's provider builder, the pydantic-converter Temporal client."""
    from adapters.providers import build_providers
    from adapters.temporal_client import connect
    from gateway.signals import TemporalSignaler

    return GatewayDeps(
        db=Database(settings.database_url),
        providers=build_providers(settings),
        signaler=TemporalSignaler(lambda: connect(settings)),
        max_body_bytes=settings.webhook_max_body_bytes,
        orphan_ttl_s=settings.webhook_orphan_ttl_s,
        provider_limits=settings.provider_limits,
    )


class LazyDeps:
    """Builds the dependencies once, on the first request that needs them."""

    def __init__(self, factory: Callable[[], GatewayDeps]):
        self._factory = factory
        self._deps: GatewayDeps | None = None

    def get(self) -> GatewayDeps:
        if self._deps is None:
            self._deps = self._factory()
        return self._deps


async def gateway_deps(request: Request) -> GatewayDeps:
    """FastAPI dependency (async: it runs on the event loop, so the lazy build happens once)."""
    return request.app.state.deps.get()
