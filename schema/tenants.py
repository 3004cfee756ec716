"""Tenants and their API keys: create, issue, list, rotate, revoke, and look a presented key up.

A key is `rq_` + 43 random URL-safe characters (256 bits); only its sha256 is stored, so a copy of
the database does not hold usable keys (a slow hash buys nothing at that entropy).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import UTC, datetime
from decimal import Decimal

from pydantic import BaseModel, Field
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from schema.models import ApiKey, Tenant

KEY_PREFIX = "rq_"
SHOWN_PREFIX = 10  # characters of a key kept in clear, to tell keys apart in a listing
TENANT_ID_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


class TenantLimits(BaseModel):
    credits: Decimal = Field(default=Decimal(1000), ge=0)
    max_concurrent: int = Field(default=10, ge=1)
    rate_per_minute: int = Field(default=600, ge=1)


class KeyInfo(BaseModel):
    key_id: str
    tenant_id: str
    prefix: str
    created_at: datetime
    revoked_at: datetime | None = None


class IssuedKey(KeyInfo):
    api_key: str  # shown once


class TenantError(ValueError):
    """A refused tenant or key operation (bad name, exists, unknown key): exit 2 at the CLI."""


def hash_key(api_key: str) -> str:
    return hashlib.sha256(api_key.encode()).hexdigest()


def create_tenant(session: Session, tenant_id: str, limits: TenantLimits) -> IssuedKey:
    """A new tenant with its limits and its first key."""
    if not TENANT_ID_RE.match(tenant_id):
        raise TenantError(f"tenant name {tenant_id!r}: lower-case letters, digits, '-' and '_', at most 64")
    if session.get(Tenant, tenant_id) is not None:
        raise TenantError(f"tenant {tenant_id} exists (issue another key with `reelqueue tenants keys create`)")
    session.add(Tenant(id=tenant_id, name=tenant_id, credit_limit=limits.credits,
                       max_concurrent=limits.max_concurrent, rate_per_minute=limits.rate_per_minute))
    session.flush()
    return issue_key(session, tenant_id)


def issue_key(session: Session, tenant_id: str) -> IssuedKey:
    if session.get(Tenant, tenant_id) is None:
        raise TenantError(f"no tenant {tenant_id}")
    api_key = KEY_PREFIX + secrets.token_urlsafe(32)
    row = ApiKey(id="key_" + secrets.token_hex(8), tenant_id=tenant_id, key_sha256=hash_key(api_key),
                 prefix=api_key[:SHOWN_PREFIX], created_at=datetime.now(UTC))
    session.add(row)
    session.flush()
    return IssuedKey(api_key=api_key, **_info(row).model_dump())


def list_keys(session: Session, tenant_id: str | None = None) -> list[KeyInfo]:
    stmt = select(ApiKey).order_by(ApiKey.tenant_id, ApiKey.created_at)
    if tenant_id is not None:
        stmt = stmt.where(ApiKey.tenant_id == tenant_id)
    return [_info(row) for row in session.scalars(stmt)]


def revoke_key(session: Session, key_id: str) -> KeyInfo:
    """From now on the key answers 401; revoking twice keeps the first time."""
    row = session.get(ApiKey, key_id, with_for_update=True)
    if row is None:
        raise TenantError(f"no key {key_id}")
    if row.revoked_at is None:
        row.revoked_at = datetime.now(UTC)
    return _info(row)


def rotate_key(session: Session, key_id: str) -> IssuedKey:
    """A new key for the same tenant, and the old one revoked, in one transaction (a tenant wanting
    both alive for a while issues a second key with `keys create` and revokes the first later)."""
    old = revoke_key(session, key_id)
    return issue_key(session, old.tenant_id)


def key_owner(session: Session, api_key: str) -> KeyInfo | None:
    """The live key matching `api_key`, or None (unknown or revoked)."""
    row = session.scalar(select(ApiKey).where(ApiKey.key_sha256 == hash_key(api_key), ApiKey.revoked_at.is_(None)))
    return _info(row) if row is not None else None


def set_limits(session: Session, tenant_id: str, limits: TenantLimits) -> None:
    session.execute(update(Tenant).where(Tenant.id == tenant_id).values(
        credit_limit=limits.credits, max_concurrent=limits.max_concurrent, rate_per_minute=limits.rate_per_minute))


def _info(row: ApiKey) -> KeyInfo:
    return KeyInfo(key_id=row.id, tenant_id=row.tenant_id, prefix=row.prefix, created_at=row.created_at,
                   revoked_at=row.revoked_at)
