"""Browser sessions: a short-lived token issued for a live API key, so that a page holds the token
and never the key. Like a key, a token is 256 random bits of which only the sha256 is stored; it
answers 401 once expired, signed out, or when its key is revoked."""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, or_, select, text, update
from sqlalchemy.orm import Session

from schema.models import BrowserSession
from schema.tenants import hash_key

TOKEN_PREFIX = "rqs_"
# The live session of a presented token, with its key's tenant (the key must be live too).
_SESSION_OWNER = text("""
SELECT k.id AS key_id, k.tenant_id, t.rate_per_minute, s.expires_at
  FROM browser_sessions s JOIN api_keys k ON k.id = s.key_id JOIN tenants t ON t.id = k.tenant_id
 WHERE s.token_sha256 = :token_sha256 AND s.revoked_at IS NULL AND s.expires_at > now()
   AND k.revoked_at IS NULL
""")


def issue(session: Session, key_id: str, ttl: timedelta, now: datetime | None = None) -> tuple[str, datetime]:
    """A new token for the key `key_id` (the caller has checked it is live) and when it expires."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    expires_at = (now or datetime.now(UTC)) + ttl
    session.add(BrowserSession(token_sha256=hash_key(token), key_id=key_id, expires_at=expires_at))
    session.flush()
    return token, expires_at


def owner(session: Session, token: str):  # noqa: ANN201 - a Row (key_id, tenant_id, rate_per_minute, expires_at)
    """The key, tenant and rate of a live session token, or None."""
    return session.execute(_SESSION_OWNER, {"token_sha256": hash_key(token)}).first()


def end(session: Session, token: str) -> None:
    """Sign-out: the token answers 401 from now on (ending it twice keeps the first time)."""
    session.execute(update(BrowserSession).where(BrowserSession.token_sha256 == hash_key(token),
                                                 BrowserSession.revoked_at.is_(None))
                    .values(revoked_at=datetime.now(UTC)))


def ended(session: Session, token_hashes: Iterable[str]) -> set[str]:
    """Which of these tokens (by sha256) are signed out or expired (one query for every open stream of
    a gateway that a browser holds)."""
    hashes = sorted(set(token_hashes))
    if not hashes:
        return set()
    return set(session.scalars(select(BrowserSession.token_sha256).where(
        BrowserSession.token_sha256.in_(hashes),
        or_(BrowserSession.revoked_at.is_not(None), BrowserSession.expires_at <= func.now()))))
