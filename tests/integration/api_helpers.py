"""The tenant API on a real uvicorn server (streams need one: the test client waits for the end of a
response), and tenants made with `reelqueue tenants create`."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from asgi_server import serving
from cli_helpers import run_cli

from adapters.providers import build_providers
from adapters.temporal_client import connect
from config.settings import Settings
from delivery.links import LinkSigner
from gateway.app import create_app
from gateway.deps import ApiLimits, GatewayDeps, TemporalConnection
from gateway.event_ids import EventIds
from reelqueue_client import ReelqueueClient
from schema.db import Database


@contextmanager
def api_server(stack: Settings, queue: str | None = None, **api: float) -> Iterator[str]:
    """A fresh gateway (nothing in memory from an earlier one: a restart) whose workflows start on
    `queue` (None: it starts none), with the API limits `api` (ApiLimits fields; the backlog check
    off unless given: it is platform-wide); yields its base URL."""
    deps = GatewayDeps(
        db=Database(stack.database_url), providers=build_providers(stack), signaler=None,
        temporal=TemporalConnection(lambda: connect(stack))
        if queue else None, task_queue=queue or "nowhere", links=LinkSigner.from_settings(stack),
        event_ids=EventIds.from_settings(stack),
        api=ApiLimits(**{"backlog_max_age_s": 0.0, **api}))
    with serving(create_app(deps, settings=stack)) as port:
        yield f"http://127.0.0.1:{port}"


def new_tenant_client(base_url: str) -> tuple[str, ReelqueueClient]:
    """A new tenant (its id) and a client with its key."""
    created = run_cli("tenants", "create", f"t-{uuid.uuid4().hex[:10]}", "--json")
    assert created.code == 0, created.stdout + created.stderr
    return created.json["tenant_id"], ReelqueueClient(base_url, created.json["api_key"])
