"""The tenant API, version 1: every route under /v1 authenticates with `require_tenant`
(gateway/tenancy.py) and scopes its queries to the caller's tenant. Each concern is a module beside
this one, included here. Bodies are capped lower than the gateway's own cap (`REELQUEUE_API_MAX_BODY_BYTES`):
JSON requests only; files go straight to object storage."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from gateway.deps import GatewayDeps, gateway_deps
from gateway.problems import ProblemError
from gateway.v1 import account, events, generations, imports, providers, sessions, uploads


def capped_body(request: Request, deps: Annotated[GatewayDeps, Depends(gateway_deps)]) -> None:
    """413 for a declared body over the API's cap (a streamed one meets the gateway's BodyLimit)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > deps.api.max_body_bytes:
        raise ProblemError(413, f"request bodies are limited to {deps.api.max_body_bytes} bytes",
                           slug="body-too-large")


router = APIRouter(prefix="/v1", dependencies=[Depends(capped_body)])
router.include_router(account.router)
router.include_router(sessions.router)
router.include_router(providers.router)
router.include_router(generations.router)
router.include_router(uploads.router)
router.include_router(imports.router)
router.include_router(events.router)
