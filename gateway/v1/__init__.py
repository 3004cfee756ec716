"""The tenant API, version 1: every route under /v1 authenticates with `require_tenant`
(gateway/tenancy.py) and scopes its queries to the caller's tenant. Each concern is a module beside
this one, included here."""

from __future__ import annotations

from fastapi import APIRouter

from gateway.v1 import account, events, imports, uploads

router = APIRouter(prefix="/v1")
router.include_router(account.router)
router.include_router(uploads.router)
router.include_router(imports.router)
router.include_router(events.router)
