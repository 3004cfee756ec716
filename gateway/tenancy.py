"""Who is calling: `require_tenant` turns `Authorization: Bearer <api key or browser session token>`
into a Principal, and counts the call against the tenant's request rate (429 with Retry-After past it).

Every /v1 route depends on it and scopes every query by `principal.tenant_id`: an object of another
tenant is answered exactly like one that does not exist (404), never 403 (docs/security.md).
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel
from sqlalchemy import text

from gateway.deps import GatewayDeps, gateway_deps
from gateway.problems import ProblemError
from schema import browser_sessions
from schema.tenants import KEY_PREFIX, hash_key

MAX_KEY_CHARS = 100
_BEARER = HTTPBearer(auto_error=False, description="a tenant's API key (reelqueue tenants create)")
WINDOW_S = 60

_KEY_OWNER = text("""
SELECT k.id AS key_id, k.tenant_id, t.rate_per_minute
  FROM api_keys k JOIN tenants t ON t.id = k.tenant_id
 WHERE k.key_sha256 = :key_sha256 AND k.revoked_at IS NULL
""")
# One row per tenant: the count restarts when a new minute starts (a fixed window).
_COUNT = text("""
INSERT INTO tenant_rate_windows AS w (tenant_id, window_start, count)
VALUES (:tenant_id, date_trunc('minute', now()), 1)
ON CONFLICT (tenant_id) DO UPDATE
   SET count = CASE WHEN w.window_start = EXCLUDED.window_start THEN w.count + 1 ELSE 1 END,
       window_start = EXCLUDED.window_start
RETURNING count, window_start, now() AS now
""")


class Principal(BaseModel):
    """The authenticated caller: a tenant, through one of its keys."""

    tenant_id: str
    key_id: str


def _unauthorized(detail: str) -> ProblemError:
    return ProblemError(401, detail, slug="unauthorized", headers={"WWW-Authenticate": "Bearer"})


def bearer_key(request: Request) -> str:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    value = value.strip()
    if scheme.lower() != "bearer" or not value:
        raise _unauthorized("send the API key as `Authorization: Bearer <key>`")
    if not value.startswith((KEY_PREFIX, browser_sessions.TOKEN_PREFIX)) or len(value) > MAX_KEY_CHARS \
            or not value.isascii():
        raise _unauthorized("the API key is not valid")
    return value


def require_tenant(request: Request, deps: Annotated[GatewayDeps, Depends(gateway_deps)],
                   _: Annotated[HTTPAuthorizationCredentials | None, Security(_BEARER)] = None) -> Principal:
    """FastAPI dependency (sync: it runs in the thread pool, beside the other blocking database work).
    `_` only declares the bearer scheme in the OpenAPI document; the header is read here."""
    key = bearer_key(request)
    with deps.db.transaction() as session:
        if key.startswith(browser_sessions.TOKEN_PREFIX):
            owner = browser_sessions.owner(session, key)
        else:
            owner = session.execute(_KEY_OWNER, {"key_sha256": hash_key(key)}).first()
        if owner is None:
            raise _unauthorized("the session has ended (expired, signed out, or its key revoked): sign in again"
                                if key.startswith(browser_sessions.TOKEN_PREFIX) else "the API key is not valid")
        counted = session.execute(_COUNT, {"tenant_id": owner.tenant_id}).one()
    principal = Principal(tenant_id=owner.tenant_id, key_id=owner.key_id)
    request.state.principal = principal
    if counted.count > owner.rate_per_minute:
        raise ProblemError(429, f"more than {owner.rate_per_minute} requests this minute", slug="rate-limited",
                           headers={"Retry-After": str(_seconds_left(counted.window_start, counted.now))})
    return principal


def _seconds_left(window_start: datetime, now: datetime) -> int:
    return max(1, math.ceil(WINDOW_S - (now - window_start).total_seconds()))


TenantDep = Annotated[Principal, Depends(require_tenant)]
