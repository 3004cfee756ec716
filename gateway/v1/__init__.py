"""The tenant API, version 1: every route under /v1 authenticates with `require_tenant`
(gateway/tenancy.py) and scopes its queries to the caller's tenant. Each concern is a module beside
this one, included here. Bodies are capped lower than the gateway's own cap
(`REELQUEUE_API_MAX_BODY_BYTES`, by the gateway's BodyLimit, chunked bodies too): JSON requests only;
files go straight to object storage. Text from a tenant (the path, the query, every string of a JSON
body) carries no control character but tab and line breaks: Postgres refuses a NUL, and none of them
belongs in an id, a prompt or a plan."""

from __future__ import annotations

import json
import re
from typing import Any

from fastapi import APIRouter, Depends, Request

from gateway.problems import ProblemError
from gateway.v1 import account, events, generations, imports, providers, sessions, uploads

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")  # and lone surrogates (no UTF-8)


async def plain_text(request: Request) -> None:
    """400 for a control character in the path or the query, 422 for one in a JSON body's strings
    (keys included), naming where; read before anything is looked up or written."""
    if _CONTROL.search(request.scope.get("path", "")):
        raise ProblemError(400, "the path contains a control character", slug="control-character")
    for name, value in request.query_params.multi_items():
        if _CONTROL.search(name) or _CONTROL.search(value):
            raise ProblemError(400, f"query parameter {_shown(name)} contains a control character",
                               slug="control-character")
    if "json" not in request.headers.get("content-type", ""):
        return
    try:
        data = json.loads(await request.body())  # the route reads the same (cached) bytes
    except (ValueError, RecursionError):
        return  # not JSON, or nested too deeply: the route's own parsing refuses it
    where = _control_in(data)
    if where is not None:
        raise ProblemError(422, f"{where or 'the body'} contains a control character or a lone surrogate (only "
                                "tab and line breaks are allowed)", slug="control-character")


def _control_in(data: Any) -> str | None:
    """Where the first string with a control character is ("plan.templates.0"), or None."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            if _CONTROL.search(value):
                return where
        elif isinstance(value, dict):
            for key, item in value.items():
                path = f"{where}.{_shown(key)}" if where else _shown(key)
                if _CONTROL.search(key):
                    return path
                stack.append((path, item))
        elif isinstance(value, list):
            stack.extend((f"{where}.{i}" if where else str(i), item) for i, item in enumerate(value))
    return None


def _shown(name: str) -> str:
    return _CONTROL.sub("?", name)[:40]


router = APIRouter(prefix="/v1", dependencies=[Depends(plain_text)])
router.include_router(account.router)
router.include_router(sessions.router)
router.include_router(providers.router)
router.include_router(generations.router)
router.include_router(uploads.router)
router.include_router(imports.router)
router.include_router(events.router)
