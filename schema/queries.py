"""Read models for the CLI and the gateway: status counts, task lists, one task in full.

Status pages read Postgres (the facts); Temporal visibility is eventually consistent and serves
the Web UI only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sqlalchemy import Row, func, select
from sqlalchemy.orm import Session

from config.defaults import AdmissionLayers
from contracts.workflow_api import PLATFORM_GATE, model_gate, tenant_gate
from schema import import_totals
from schema.db import Database
from schema.import_scope import in_import
from schema.models import (
    Asset,
    Attempt,
    CatalogImport,
    CreditEntry,
    Rendition,
    ReviewCheck,
    StateEvent,
    Task,
    Tenant,
)


def _scoped(stmt, import_id: str | None):  # noqa: ANN001, ANN202 - a Select
    if import_id:
        return stmt.where(in_import(import_id))
    return stmt


def status_counts(session: Session, import_id: str | None = None) -> dict[str, int]:
    """Tasks by status: an import's from its running totals (a few rows whatever its size), all tasks'
    by counting them."""
    if import_id:
        return import_totals.status_counts(session, import_id)
    stmt = select(Task.status, func.count()).select_from(Task).group_by(Task.status)
    return {status: n for status, n in session.execute(stmt).all()}


def providers_in_use(session: Session, import_id: str | None = None) -> list[str]:
    stmt = _scoped(select(Task.provider).select_from(Task), import_id).distinct().order_by(Task.provider)
    return list(session.scalars(stmt).all())


def layer_gates_in_use(session: Session, import_id: str | None, layers: AdmissionLayers) -> dict[str, list[str]]:
    """The gates of the admission layers beside the providers' that tasks of the scope use: the
    platform's when it has a total, each tenant's that has a concurrency, each model's that has a limit."""
    tenants = session.scalars(_scoped(select(Task.tenant_id).join(Tenant, Tenant.id == Task.tenant_id)
                                      .where(Tenant.max_concurrent.is_not(None)), import_id)
                              .distinct().order_by(Task.tenant_id)).all()
    models = session.execute(_scoped(select(Task.provider, Task.model), import_id).distinct()
                             .order_by(Task.provider, Task.model)).all()
    return {"platform": [PLATFORM_GATE] if layers.platform is not None else [],
            "tenants": [tenant_gate(t) for t in tenants],
            "models": [model_gate(p, m) for p, m in models if layers.model(p, m) is not None]}


def list_tasks(session: Session, import_id: str | None = None, status: str | None = None,
               limit: int | None = None) -> list[Task]:
    stmt = _scoped(select(Task), import_id)
    if status:
        stmt = stmt.where(Task.status == status)
    stmt = stmt.order_by(Task.product_id, Task.template_id, Task.locale, Task.aspect_ratio, Task.variant)
    if limit:
        stmt = stmt.limit(limit)
    return list(session.scalars(stmt).all())


def count_tasks(session: Session, import_id: str | None = None) -> int:
    return session.scalar(_scoped(select(func.count()).select_from(Task), import_id)) or 0


# What starting a task's workflow needs: a page of these is small whatever the import's size.
START_COLUMNS = (Task.id, Task.workflow_id, Task.status, Task.run_no, Task.product_id, Task.template_id,
                 Task.locale, Task.aspect_ratio, Task.provider)


def iter_tasks_to_start(db: Database, import_id: str, *, page_size: int = 500) -> Iterator[Row]:
    """Every task of an import in pages by id, each page its own short transaction: memory holds one
    page, and no transaction stays open while workflows are being started."""
    after = ""
    while True:
        with db.transaction() as session:
            stmt = _scoped(select(*START_COLUMNS), import_id).where(Task.id > after).order_by(Task.id)
            rows = session.execute(stmt.limit(page_size)).all()
        if not rows:
            return
        yield from rows
        after = rows[-1].id


def status_calls_per_task(session: Session, import_id: str) -> float:
    """Provider status calls (polls) per task of an import, over all its attempts."""
    calls = session.scalar(_scoped(select(func.coalesce(func.sum(Attempt.poll_count), 0)).select_from(Task)
                                   .join(Attempt, Attempt.task_id == Task.id), import_id)) or 0
    tasks = count_tasks(session, import_id)
    return round(calls / tasks, 2) if tasks else 0.0


def import_exists(session: Session, import_id: str, tenant_id: str | None = None) -> bool:
    """The import exists (and belongs to `tenant_id`, when given)."""
    row = session.get(CatalogImport, import_id)
    return row is not None and (tenant_id is None or row.tenant_id == tenant_id)


def latest_import(session: Session) -> CatalogImport | None:
    return session.scalar(select(CatalogImport).order_by(CatalogImport.created_at.desc()).limit(1))


def task_summary(task: Task) -> dict[str, Any]:
    return {
        "id": task.id, "status": task.status, "product_id": task.product_id, "template": task.template_id,
        "locale": task.locale, "aspect_ratio": task.aspect_ratio, "variant": task.variant,
    }


def task_detail(session: Session, task_id: str) -> dict[str, Any] | None:
    task = session.get(Task, task_id)
    if task is None:
        return None
    attempts = session.scalars(select(Attempt).where(Attempt.task_id == task_id).order_by(Attempt.attempt_no))
    events = session.scalars(select(StateEvent).where(StateEvent.task_id == task_id).order_by(StateEvent.id))
    assets = session.scalars(select(Asset).where(Asset.task_id == task_id).order_by(Asset.kind))
    ledger = session.scalars(select(CreditEntry).where(CreditEntry.task_id == task_id).order_by(CreditEntry.id))
    renditions = session.scalars(select(Rendition).where(Rendition.task_id == task_id).order_by(Rendition.profile))
    checks = session.scalars(select(ReviewCheck).where(ReviewCheck.task_id == task_id).order_by(ReviewCheck.id))
    return {
        "task": {
            **task_summary(task), "tenant": task.tenant_id, "import_id": task.import_id, "version": task.version,
            "progress": float(task.progress), "prompt": task.prompt, "prompt_override": task.prompt_override,
            "overlay": task.overlay,
            "duration_s": float(task.duration_s), "provider": task.provider, "model": task.model,
            "estimated_cost": float(task.estimated_cost), "current_attempt_no": task.current_attempt_no,
            "workflow_id": task.workflow_id, "output_asset_id": task.output_asset_id,
            "cancel_outcome": task.cancel_outcome, "next_retry_at": _iso(task.next_retry_at),
            "last_error_class": task.last_error_class,
            "last_error": task.last_error, "identity": task.identity, "created_at": _iso(task.created_at),
            "updated_at": _iso(task.updated_at), "finished_at": _iso(task.finished_at),
        },
        "renditions": [
            {"profile": r.profile, "status": r.status, "attempts": r.attempts, "asset_id": r.asset_id,
             "error": r.error, "error_class": r.error_class, "verdict": r.verdict, "updated_at": _iso(r.updated_at)}
            for r in renditions
        ],
        "attempts": [
            {
                "attempt_no": a.attempt_no, "provider": a.provider, "model": a.model, "request_key": a.request_key,
                "provider_job_id": a.provider_job_id, "submit_state": a.submit_state,
                "provider_status": a.provider_status, "http_status": a.http_status, "error_class": a.error_class,
                "error": a.error_message, "poll_count": a.poll_count, "usage": a.usage, "worker_id": a.worker_id,
                "software_version": a.software_version, "request_fingerprint": a.request_fingerprint,
                "route_note": a.route_note,
                "sent_at": _iso(a.sent_at), "acked_at": _iso(a.acked_at), "completed_at": _iso(a.completed_at),
            }
            for a in attempts
        ],
        "events": [
            {
                "event": e.event, "from": e.from_status, "to": e.to_status, "version": e.task_version,
                "applied": e.applied, "source": e.source, "attempt_no": e.attempt_no, "payload": e.payload,
                "at": _iso(e.created_at),
            }
            for e in events
        ],
        "assets": [
            {
                "id": a.id, "kind": a.kind, "bucket": a.bucket, "key": a.key, "sha256": a.sha256, "size": a.size,
                "mime": a.mime, "duration_s": float(a.duration_s) if a.duration_s is not None else None,
                "width": a.width, "height": a.height, "codec": a.codec, "pipeline_version": a.pipeline_version,
                "meta": a.meta,
            }
            for a in assets
        ],
        "ledger": [
            {"type": c.entry_type, "amount": float(c.amount), "business_key": c.business_key, "note": c.note}
            for c in ledger
        ],
        "review_checks": [  # the automatic checks of each proxy rendition (review on)
            {"attempt_no": c.attempt_no, "asset_id": c.asset_id, **c.results} for c in checks
        ],
    }


def _iso(value) -> str | None:  # noqa: ANN001 - datetime | None
    return value.isoformat() if value else None
