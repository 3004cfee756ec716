"""The tenant API, version 1: every route under /v1 authenticates with `require_tenant`
(gateway/tenancy.py) and scopes its queries to the caller's tenant. Each concern is a module beside
this one, included here. Bodies are capped lower than the gateway's own cap (`REELQUEUE_API_MAX_BODY_BYTES`,
by the gateway's BodyLimit, chunked bodies too): JSON requests only; files go straight to object storage."""

from __future__ import annotations

from fastapi import APIRouter

from gateway.v1 import account, events, generations, imports, uploads

router = APIRouter(prefix="/v1")
router.include_router(account.router)
router.include_router(generations.router)
router.include_router(uploads.router)
router.include_router(imports.router)
router.include_router(events.router)
