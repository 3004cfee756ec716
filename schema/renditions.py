"""Rendition rows: one per (raw output, profile, pipeline version), READY or FAILED with the error."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from schema.assets import asset_id_for
from schema.models import Rendition


def record_rendition(
    session: Session,
    *,
    tenant_id: str,
    task_id: str,
    raw_asset_id: str,
    profile: str,
    pipeline_version: str,
    asset_id: str | None = None,
    error: str | None = None,
    error_class: str | None = None,
    verdict: str | None = None,
) -> Rendition:
    """READY with its asset, or FAILED with the error; every call is one more attempt. A READY row
    never goes back to FAILED (a late failure of a repeated run changes nothing)."""
    status = "READY" if asset_id is not None else "FAILED"
    key = f"{raw_asset_id}:{profile}:{pipeline_version}"
    changes = {"status": status, "asset_id": asset_id, "error": error, "error_class": error_class,
               "verdict": verdict, "attempts": Rendition.attempts + 1, "updated_at": func.now()}
    statement = insert(Rendition).values(
        id=asset_id_for(f"rendition:{key}"), tenant_id=tenant_id, task_id=task_id, raw_asset_id=raw_asset_id,
        profile=profile, pipeline_version=pipeline_version, attempts=1,
        **{k: v for k, v in changes.items() if k not in ("attempts", "updated_at")},
    )
    session.execute(statement.on_conflict_do_update(
        index_elements=["raw_asset_id", "profile", "pipeline_version"], set_=changes,
        where=Rendition.status != "READY",
    ))
    return session.scalar(select(Rendition).where(
        Rendition.raw_asset_id == raw_asset_id, Rendition.profile == profile,
        Rendition.pipeline_version == pipeline_version))


def task_renditions(session: Session, task_id: str) -> list[Rendition]:
    return list(session.scalars(select(Rendition).where(Rendition.task_id == task_id).order_by(Rendition.profile)))
