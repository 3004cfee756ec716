"""What a reviewer sees and decides: the review queue of one import, and decisions sent to the
tasks' workflows as the `review` update (control/resolve.py's `send_update`).

Shared by the gateway's gallery (gateway/review.py) and `reelqueue review` (cli/review.py); reads
are a few set-based queries per page, decisions go to Temporal, never to the task row directly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from decimal import Decimal

from pydantic import BaseModel
from sqlalchemy import case, func, select
from sqlalchemy.orm import Session
from temporalio.client import Client

from contracts import workflow_api as api
from contracts.messages import CheckOutcome, ReviewRequest, ReviewResult
from contracts.task import TaskStatus
from control.resolve import ResolveNotDelivered, ResolveRefused, UnknownTask, send_update
from schema.db import Database
from schema.import_scope import in_import
from schema.models import Asset, Attempt, CreditEntry, Product, ReviewCheck, Task, ValidationIssue

DECISIONS_AT_ONCE = 8  # a bulk approve sends this many updates concurrently


class ReviewItem(BaseModel):
    task_id: str
    status: str
    product_id: str
    title: str
    price: str | None
    currency: str | None
    locale: str
    aspect_ratio: str
    template_id: str
    variant: str
    prompt: str  # the reviewer's edit when there is one
    prompt_edited: bool
    checks_passed: bool | None  # None: not checked (review off, or not yet rendered)
    checks: list[CheckOutcome]
    cost: float  # credits charged so far (SETTLE + ADJUSTMENT)
    attempts: int
    proxy_key: str | None
    last_error: str | None


class IssueItem(BaseModel):
    row: int | None
    product_id: str | None
    field: str
    value: str
    reason: str
    action: str


class Filters(BaseModel):
    status: str | None = TaskStatus.REVIEW.value  # None: every status
    locale: str | None = None
    aspect_ratio: str | None = None
    template_id: str | None = None


class DecisionOutcome(BaseModel):
    task_id: str
    ok: bool
    status: str | None = None
    message: str


def review_items(session: Session, import_id: str, filters: Filters | None = None, *, offset: int = 0,
                 limit: int | None = None) -> list[ReviewItem]:
    """The import's tasks that match `filters` (default: those waiting in REVIEW), with what a
    reviewer needs to judge each; those whose latest automatic checks failed come first. `offset` and
    `limit` page through them in the database (the gallery shows one page at a time)."""
    f = filters or Filters()
    latest_passed = (select(ReviewCheck.passed).where(ReviewCheck.task_id == Task.id)
                     .order_by(ReviewCheck.id.desc()).limit(1).scalar_subquery())
    stmt = (select(Task, Product, Asset.key)
            .join(Product, Product.id == Task.product_ref)
            .outerjoin(Asset, Asset.id == Task.output_asset_id)
            .where(in_import(import_id)))
    for column, value in ((Task.status, f.status), (Task.locale, f.locale), (Task.aspect_ratio, f.aspect_ratio),
                          (Task.template_id, f.template_id)):
        if value:
            stmt = stmt.where(column == value)
    stmt = stmt.order_by(case((latest_passed.is_(False), 0), else_=1), Task.product_id, Task.template_id,
                         Task.locale, Task.aspect_ratio, Task.variant).offset(offset)
    rows = session.execute(stmt if limit is None else stmt.limit(limit)).all()
    ids = [task.id for task, _, _ in rows]
    costs, attempts, checks = _costs(session, ids), _attempts(session, ids), _checks(session, ids)
    items = []
    for task, product, proxy_key in rows:
        check = checks.get(task.id)
        items.append(ReviewItem(
            task_id=task.id, status=task.status, product_id=task.product_id, title=product.title,
            price=f"{product.price:.2f}" if product.price is not None else None, currency=product.currency,
            locale=task.locale, aspect_ratio=task.aspect_ratio, template_id=task.template_id, variant=task.variant,
            prompt=task.prompt_override or task.prompt, prompt_edited=task.prompt_override is not None,
            checks_passed=check.passed if check else None,
            checks=[CheckOutcome.model_validate(c) for c in check.results.get("checks", [])] if check else [],
            cost=float(costs.get(task.id, Decimal(0))), attempts=attempts.get(task.id, 0), proxy_key=proxy_key,
            last_error=task.last_error,
        ))
    return items


def _costs(session: Session, ids: Sequence[str]) -> dict[str, Decimal]:
    stmt = (select(CreditEntry.task_id, func.sum(CreditEntry.amount))
            .where(CreditEntry.task_id.in_(ids), CreditEntry.entry_type.in_(("SETTLE", "ADJUSTMENT")))
            .group_by(CreditEntry.task_id))
    return dict(session.execute(stmt).all()) if ids else {}


def _attempts(session: Session, ids: Sequence[str]) -> dict[str, int]:
    stmt = select(Attempt.task_id, func.count()).where(Attempt.task_id.in_(ids)).group_by(Attempt.task_id)
    return dict(session.execute(stmt).all()) if ids else {}


def _checks(session: Session, ids: Sequence[str]) -> dict[str, ReviewCheck]:
    """The latest checks per task (a regenerated task has one row per rendition)."""
    if not ids:
        return {}
    rows = session.scalars(select(ReviewCheck).where(ReviewCheck.task_id.in_(ids)).order_by(ReviewCheck.id))
    return {row.task_id: row for row in rows}


def status_counts(session: Session, import_id: str) -> dict[str, int]:
    stmt = (select(Task.status, func.count()).where(in_import(import_id)).group_by(Task.status))
    return dict(session.execute(stmt).all())


def facets(session: Session, import_id: str) -> dict[str, list[str]]:
    """The values each filter can take in this import."""
    out = {}
    for name, column in (("locale", Task.locale), ("aspect_ratio", Task.aspect_ratio),
                         ("template_id", Task.template_id)):
        stmt = select(column).where(in_import(import_id)).distinct().order_by(column)
        out[name] = list(session.scalars(stmt))
    return out


def import_issues(session: Session, import_id: str) -> list[IssueItem]:
    """The import's validation issues (copy review, image review, ...) with row, field, value, reason."""
    rows = session.scalars(select(ValidationIssue).where(ValidationIssue.import_id == import_id)
                           .order_by(ValidationIssue.row, ValidationIssue.id))
    return [IssueItem(row=r.row, product_id=r.product_id, field=r.field, value=r.value, reason=r.reason,
                      action=r.action) for r in rows]


def tasks_of_import(session: Session, import_id: str, task_ids: Sequence[str]) -> set[str]:
    """Which of `task_ids` belong to the import (a reviewer's token covers one import only)."""
    stmt = select(Task.id).where(in_import(import_id), Task.id.in_(task_ids))
    return set(session.scalars(stmt))


async def decide(db: Database, client: Client, task_ids: Sequence[str],
                 request: ReviewRequest) -> list[DecisionOutcome]:
    """Send one decision to each task's workflow (a few at a time); each answer says whether the
    workflow took it, and the task's status after."""
    limit = asyncio.Semaphore(DECISIONS_AT_ONCE)

    async def one(task_id: str) -> DecisionOutcome:
        async with limit:
            try:
                _, result = await send_update(db, client, task_id, api.UPDATE_REVIEW, request, ReviewResult)
            except (UnknownTask, ResolveRefused, ResolveNotDelivered) as exc:
                return DecisionOutcome(task_id=task_id, ok=False, message=str(exc))
            return DecisionOutcome(task_id=task_id, ok=True, status=result.status.value, message=result.message)

    return list(await asyncio.gather(*(one(t) for t in task_ids)))
