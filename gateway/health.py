"""`/readyz`: whether this gateway can serve now (its database and its Temporal namespace answer),
for a readiness probe; `/healthz` (liveness) answers without either."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from sqlalchemy import text
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest

from gateway.deps import GatewayDeps, TemporalConnection, gateway_deps
from schema.db import Database

router = APIRouter()
CHECK_TIMEOUT_S = 3.0  # each check; a probe's own timeout is longer (deploy/kubernetes/gateway.yaml)


def _database(db: Database) -> None:
    with db.engine.connect() as connection:
        connection.execute(text("SELECT 1"))


async def _temporal(temporal: TemporalConnection) -> None:
    client = await temporal.get()
    await client.workflow_service.describe_namespace(
        DescribeNamespaceRequest(namespace=client.namespace), timeout=timedelta(seconds=CHECK_TIMEOUT_S))


async def _failure(check: asyncio.Future | asyncio.Task | object) -> str | None:
    """None when the check passed; else the kind of failure (never its message: it may name a host or user)."""
    try:
        await asyncio.wait_for(check, CHECK_TIMEOUT_S)  # type: ignore[arg-type]
    except Exception as exc:  # any failure means "not ready"; the type says which
        return type(exc).__name__
    return None


@router.get("/readyz", include_in_schema=False)
async def readyz(deps: Annotated[GatewayDeps, Depends(gateway_deps)]) -> JSONResponse:
    """200 when Postgres answers a query and Temporal describes the namespace; 503 naming what failed."""
    failures = {"database": await _failure(asyncio.to_thread(_database, deps.db))}
    if deps.temporal is not None:
        failures["temporal"] = await _failure(_temporal(deps.temporal))
    failed = {name: kind for name, kind in failures.items() if kind}
    body = {"ready": not failed, **{name: kind is None for name, kind in failures.items()}, "failed": failed}
    return JSONResponse(body, status_code=503 if failed else 200)
