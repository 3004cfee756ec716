"""Upload rows: every read carries the tenant (an unguessable id is not authorization), and a status
moves only forward: PENDING -> VALIDATING -> READY | REJECTED."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from schema.models import Asset, Tenant, Upload

PENDING, VALIDATING, READY, REJECTED = "PENDING", "VALIDATING", "READY", "REJECTED"
OPEN = (PENDING, VALIDATING)


def find_upload(session: Session, tenant_id: str, upload_id: str) -> Upload | None:
    return session.scalar(select(Upload).where(Upload.id == upload_id, Upload.tenant_id == tenant_id))


def pending_count(session: Session, tenant_id: str, *, lock: bool = False) -> int:
    """The tenant's uploads awaiting completion. With `lock`, first a transaction-scoped lock of the
    tenant's upload quota: count and insert in that transaction, and concurrent creates take turns."""
    if lock:
        session.execute(select(func.pg_advisory_xact_lock(func.hashtextextended(f"upload-quota:{tenant_id}", 0))))
    return session.scalar(select(func.count()).select_from(Upload)
                          .where(Upload.tenant_id == tenant_id, Upload.status == PENDING)) or 0


def ready_asset(session: Session, tenant_id: str, asset_id: str, *, kind: str | None = "IMAGE") -> Asset | None:
    """The stored asset of upload `asset_id` if it is READY, belongs to `tenant_id` and is of `kind`
    (IMAGE, VIDEO, CATALOG; None: any), else None. What a generation or an import may refer to."""
    stmt = (select(Asset).join(Upload, Upload.asset_id == Asset.id)
            .where(Upload.id == asset_id, Upload.tenant_id == tenant_id, Asset.tenant_id == tenant_id,
                   Upload.status == READY))
    if kind is not None:
        stmt = stmt.where(Upload.kind == kind)
    return session.scalar(stmt)


def claim_validation(session: Session, upload_id: str, lease_s: float) -> bool:
    """PENDING -> VALIDATING for this caller alone; a VALIDATING row untouched for `lease_s` (its
    validator died) may be claimed again. False: someone else validates it, or it has ended."""
    stale = func.now() - timedelta(seconds=lease_s)
    result = session.execute(update(Upload).where(
        Upload.id == upload_id,
        or_(Upload.status == PENDING, and_(Upload.status == VALIDATING, Upload.updated_at < stale)),
    ).values(status=VALIDATING, updated_at=func.now()))
    return result.rowcount == 1


def move(session: Session, upload_id: str, to: str, *, allowed_from: tuple[str, ...], reason: str | None = None,
         asset_id: str | None = None) -> bool:
    """Set the status if the row is still in one of `allowed_from` (a concurrent complete may have
    ended it); True when this call moved it."""
    values: dict = {"status": to, "updated_at": func.now()}
    if reason is not None:
        values["reason"] = reason
    if asset_id is not None:
        values["asset_id"] = asset_id
    result = session.execute(update(Upload).where(Upload.id == upload_id, Upload.status.in_(allowed_from))
                             .values(**values))
    return result.rowcount == 1


def record_upload_asset(session: Session, upload: Upload, **fields: Any) -> Asset:
    """The asset row of a validated upload, under the upload's own id: the id the client holds is the
    asset id a generation names (`assets.id`), and the row exists only once the upload is READY."""
    session.execute(insert(Asset).values(id=upload.id, business_key=f"upload:{upload.id}",
                                         tenant_id=upload.tenant_id,
                                         meta={"source": f"upload:{upload.id}", "filename": upload.filename},
                                         **fields).on_conflict_do_nothing(index_elements=["business_key"]))
    asset = session.get(Asset, upload.id)
    assert asset is not None
    return asset


def expired_pending_uploads(session: Session, now: datetime | None = None, limit: int = 500) -> list[Upload]:
    """Uploads never completed before their deadline (the partial index ix_uploads_open). One left
    VALIDATING by an interrupted complete waits for the client's repeated complete instead."""
    now = now or datetime.now(UTC)
    return list(session.scalars(select(Upload).where(Upload.status == PENDING, Upload.expires_at < now)
                                .order_by(Upload.expires_at).limit(limit)))


def tenants_with_uploads_since(session: Session, since: datetime) -> list[str]:
    """Tenants that created an upload after `since` (one probe of ix_uploads_tenant per tenant)."""
    recent = select(Upload.id).where(Upload.tenant_id == Tenant.id, Upload.created_at > since).exists()
    return list(session.scalars(select(Tenant.id).where(recent).order_by(Tenant.id)))


def statuses(session: Session, tenant_id: str, upload_ids: list[str]) -> dict[str, str]:
    """The status of each of the tenant's uploads among `upload_ids` (absent: no such row)."""
    rows = session.execute(select(Upload.id, Upload.status)
                           .where(Upload.tenant_id == tenant_id, Upload.id.in_(upload_ids)))
    return {upload_id: status for upload_id, status in rows}
