"""What the gateway's routes need, built from Settings on first use (or given by a test).

Nothing connects at start-up: /healthz answers without Postgres or Temporal, the database engine
connects on the first webhook, the Temporal client on the first signal.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from fastapi import Request

from adapters.providers.base import VideoProvider
from config.defaults import DEFAULT_TASK_QUEUE, ProviderLimits
from config.settings import Settings
from contracts.messages import ProviderUpdate
from schema.db import Database

if TYPE_CHECKING:
    from temporalio.client import Client

    from delivery.links import LinkSigner
    from gateway.event_ids import EventIds


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
    # The tenant API (/v1): where its workflows start, how its media links are signed, its limits.
    temporal: TemporalConnection | None = None
    task_queue: str = DEFAULT_TASK_QUEUE
    links: LinkSigner | None = None
    event_ids: EventIds | None = None  # seals the event ids tenants see (None: GET /v1/events answers 503)
    api: ApiLimits = field(default_factory=lambda: ApiLimits())


@dataclass
class ApiLimits:
    """Platform-wide limits of the tenant API (Settings: REELQUEUE_API_*)."""

    max_body_bytes: int = 64 * 1024
    backlog_max_age_s: float = 1800.0  # creates answer 503 while the oldest waiting task is older; 0: off
    credits_per_second: float = 1.0  # a generation's reservation: its duration times this
    max_import_tasks: int = 10_000  # tasks one POST /v1/imports may expand to
    max_streams_per_tenant: int = 5  # open GET /v1/events streams of one tenant, on all gateways together
    backlog_read: tuple[float, float] = (0.0, 0.0)  # (monotonic time, age s) of the last backlog reading


class TemporalConnection:
    """One Temporal client for the process, connected on first use (the gateway starts without Temporal)."""

    def __init__(self, connect: Callable[[], Awaitable[Client]]):
        self._connect = connect
        self._client: Client | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> Client:
        async with self._lock:
            if self._client is None:
                self._client = await self._connect()
            return self._client


def deps_from_settings(settings: Settings) -> GatewayDeps:
    """The production wiring: the worker's provider builder, the pydantic-converter Temporal client."""
    from adapters.providers import build_providers
    from adapters.temporal_client import connect
    from delivery.links import LinkSigner
    from gateway.event_ids import EventIds
    from gateway.signals import TemporalSignaler

    return GatewayDeps(
        db=Database(settings.database_url),
        providers=build_providers(settings),
        signaler=TemporalSignaler(lambda: connect(settings)),
        max_body_bytes=settings.webhook_max_body_bytes,
        orphan_ttl_s=settings.webhook_orphan_ttl_s,
        provider_limits=settings.provider_limits,
        temporal=TemporalConnection(lambda: connect(settings)),
        task_queue=settings.task_queue,
        links=LinkSigner.from_settings(settings),
        event_ids=EventIds.from_settings(settings),
        api=ApiLimits(max_body_bytes=settings.api_max_body_bytes, backlog_max_age_s=settings.api_backlog_max_age_s,
                      credits_per_second=settings.api_credits_per_second,
                      max_import_tasks=settings.api_max_import_tasks,
                      max_streams_per_tenant=settings.api_max_streams_per_tenant),
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
