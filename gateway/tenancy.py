"""Who is calling: `require_tenant` turns `Authorization: Bearer <api key or browser session token>`
into a Principal, and counts the call against the tenant's request rate (429 with Retry-After past it).

Every /v1 route depends on it and scopes every query by `principal.tenant_id`: an object of another
tenant is answered exactly like one that does not exist (404), never 403 (docs/security.md).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Annotated, TypeVar

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel
from sqlalchemy import text
from sqlalchemy.orm import Session

from gateway.deps import GatewayDeps, gateway_deps
from gateway.problems import ProblemError
from schema import browser_sessions
from schema.db import Database
from schema.tenants import KEY_PREFIX, hash_key

MAX_KEY_CHARS = 100
_BEARER = HTTPBearer(auto_error=False, description="a tenant's API key (reelqueue tenants create)")
WINDOW_S = 60
KEY_CHECK_S = 1.0  # how often a long answer (an export) asks again whether its key was revoked
T = TypeVar("T")

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


_KEY_LIVE = text("SELECT 1 FROM api_keys WHERE id = :key_id AND revoked_at IS NULL")
_REVOKED = text("SELECT id FROM api_keys WHERE id = ANY(CAST(:ids AS text[])) AND revoked_at IS NOT NULL")


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


def key_is_live(session: Session, key_id: str) -> bool:
    """The key has not been revoked since the request was let in (what a long response re-checks)."""
    return session.execute(_KEY_LIVE, {"key_id": key_id}).first() is not None


def revoked_keys(session: Session, key_ids: Iterable[str]) -> set[str]:
    """Which of these keys have been revoked (one query for every open stream of a gateway)."""
    ids = sorted(set(key_ids))
    if not ids:
        return set()
    return set(session.scalars(_REVOKED, {"ids": ids}))


def while_live(chunks: Iterable[T], live: Callable[[], bool], every_s: float = KEY_CHECK_S) -> Iterator[T]:
    """A long answer's chunks until `live()` says no (its key was revoked), asked at most every
    `every_s` while the answer streams: what is already sent stays sent, nothing more follows."""
    checked = time.monotonic()
    for chunk in chunks:
        if time.monotonic() - checked >= every_s:
            if not live():
                return
            checked = time.monotonic()
        yield chunk


def key_check(db: Database, key_id: str) -> Callable[[], bool]:
    """`live` for `while_live`: the key has not been revoked."""
    def live() -> bool:
        with db.transaction() as session:
            return key_is_live(session, key_id)
    return live


def _seconds_left(window_start: datetime, now: datetime) -> int:
    return max(1, math.ceil(WINDOW_S - (now - window_start).total_seconds()))


TenantDep = Annotated[Principal, Depends(require_tenant)]
