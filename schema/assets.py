"""Asset rows: one per business key, so re-running a step finds its earlier output."""

from __future__ import annotations

import hashlib
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from schema.models import Asset


def asset_id_for(business_key: str) -> str:
    return hashlib.sha256(business_key.encode()).hexdigest()[:32]


def find_asset(session: Session, business_key: str) -> Asset | None:
    return session.scalar(select(Asset).where(Asset.business_key == business_key))


def record_asset(session: Session, *, business_key: str, **fields: Any) -> Asset:
    """Insert the asset unless its business key exists; return the stored row either way."""
    session.execute(
        insert(Asset)
        .values(id=asset_id_for(business_key), business_key=business_key, **fields)
        .on_conflict_do_nothing(index_elements=["business_key"])
    )
    asset = find_asset(session, business_key)
    assert asset is not None
    return asset
