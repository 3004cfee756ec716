"""The tenant API, version 1: every route under /v1 authenticates with `require_tenant`
(gateway/tenancy.py) and scopes its queries to the caller's tenant. Each concern is a module beside
this one, included here. Bodies are capped lower than the gateway's own cap
(`REELQUEUE_API_MAX_BODY_BYTES`, by the gateway's BodyLimit, chunked bodies too): JSON requests only;
files go straight to object storage. Text from a tenant (the path, the query, every string of a JSON
body) carries no control character but tab and line breaks, no bidi control and no lone surrogate
(contracts/tenant_text.py): Postgres refuses a NUL, a terminal obeys ESC, a page obeys U+202E, and
none of them belongs in an id, a prompt or a plan."""

from __future__ import annotations

import json

from fastapi import APIRouter, Depends, Request

from contracts.tenant_text import REFUSED, UNSAFE, shown_name, unsafe_in
from gateway.problems import ProblemError
from gateway.v1 import account, events, generations, imports, providers, sessions, uploads


async def plain_text(request: Request) -> None:
    """400 for a refused character (contracts/tenant_text.py) in the path or the query, 422 for one
    in a JSON body's strings (keys included), naming where; read before anything is looked up or written."""
    if UNSAFE.search(request.scope.get("path", "")):
        raise ProblemError(400, f"the path {REFUSED}", slug="control-character")
    for name, value in request.query_params.multi_items():
        if UNSAFE.search(name) or UNSAFE.search(value):
            raise ProblemError(400, f"query parameter {shown_name(name)} {REFUSED}", slug="control-character")
    if "json" not in request.headers.get("content-type", ""):
        return
    try:
        data = json.loads(await request.body())  # the route reads the same (cached) bytes
    except (ValueError, RecursionError):
        return  # not JSON, or nested too deeply: the route's own parsing refuses it
    where = unsafe_in(data)
    if where is not None:
        raise ProblemError(422, f"{where or 'the body'} {REFUSED}", slug="control-character")


router = APIRouter(prefix="/v1", dependencies=[Depends(plain_text)])
router.include_router(account.router)
router.include_router(sessions.router)
router.include_router(providers.router)
router.include_router(generations.router)
router.include_router(uploads.router)
router.include_router(imports.router)
router.include_router(events.router)
