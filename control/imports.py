"""Imports as operations that `reelqueue import / run / export` and `/v1/imports` share: the same
importer, the same workflow starts, the same cancel path, the same export rows."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Row, select
from temporalio.client import Client

from adapters.providers.base import VideoProvider
from adapters.storage import ObjectStorage
from catalog.importer import ImportRejected, ImportSummary, import_summary
from catalog.plan import Plan, PlanError, check_routes, plan_from_data, read_toml
from catalog.readers import read_catalog
from catalog.service import run_import
from config.settings import Settings
from contracts.admission import PriorityClass
from control.generations import server_price
from schema import queries
from schema.db import Database
from schema.models import CatalogImport, ValidationIssue
from schema.state_machine import TERMINAL
from schema.uploads import ready_asset

CANCEL_CONCURRENCY = 16
T = TypeVar("T")
MAX_PLAN_CHARS = 256 * 1024
SHOWN_ISSUES = 1000  # the issues an import's view lists (the counts cover all of them)
CATALOG_NAME_CHARS = 200  # catalog_imports.catalog


class ImportRequest(BaseModel):
    """`POST /v1/imports`: a READY catalog upload and a plan (TOML text or a JSON object)."""

    model_config = ConfigDict(extra="forbid")
    asset_id: str = Field(pattern=r"^ast_[0-9a-f]{32}$")
    plan: str | dict[str, Any] = Field(description="the production plan: TOML text, or the same as a JSON object")
    catalog: str | None = Field(default=None, min_length=1, max_length=CATALOG_NAME_CHARS)
    check_urls: bool = True


class ImportView(BaseModel):
    """An import's report: the summary `reelqueue import` prints, its issues, its tasks by status."""

    summary: ImportSummary
    by_status: dict[str, int]
    issues: list[dict[str, Any]]
    issues_total: int


class CatalogNotReady(LookupError):
    """The asset is not a READY catalog upload of this tenant (or does not exist)."""


class CatalogNameTooLong(ValueError):
    """No `catalog` was given and the upload's file name is too long to name one (the message says so)."""


class ImportTooLarge(ValueError):
    """The catalog's products times the plan's combinations exceed what one request may create."""

    def __init__(self, products: int, combinations: int, limit: int):
        super().__init__(f"{products} products x {combinations} combinations would make {products * combinations} "
                         f"tasks; an import through the API makes at most {limit} (split the catalog)")


def plan_of(request: ImportRequest, *, credits_per_second: float) -> Plan:
    """A tenant's plan (PlanError with the reason when it does not parse or validate), held to what a
    tenant may say (docs/security.md, "Plans"): each template's cost_estimate is the server's price
    for its duration, whatever the plan wrote; `[providers.NAME] max_concurrent` becomes the
    tenant's own limit (its admission layer), never the provider's shared gate, and nothing else
    of a provider's limits may be set."""
    if isinstance(request.plan, str):
        if len(request.plan) > MAX_PLAN_CHARS:
            raise PlanError(f"the plan is limited to {MAX_PLAN_CHARS} characters")
        data: Any = read_toml(request.plan, "plan")
    else:
        data = dict(request.plan)
    if isinstance(data, dict):
        data = _tenant_sections(data)
    plan = plan_from_data(data, "plan")
    priced = [t.model_copy(update={"cost_estimate": server_price(t.duration_s, credits_per_second)})
              for t in plan.templates]
    return plan.model_copy(update={"templates": priced})


def _tenant_sections(data: dict[str, Any]) -> dict[str, Any]:
    """The tenant's plan with its operator-only sections turned into what a tenant may ask for."""
    if "tenant_limits" in data:
        raise PlanError("plan: tenant_limits is the server's; ask with [providers.NAME] max_concurrent")
    if data.get("priority") not in (None, PriorityClass.BULK.value):
        raise PlanError('plan: priority: an import through the API runs as "bulk" (a generation of '
                        'POST /v1/generations is interactive); only the operator gives an import another class')
    templates = data.get("templates")
    if isinstance(templates, list):  # a placeholder: the server's price replaces it after validation
        data["templates"] = [{**t, "cost_estimate": 0} if isinstance(t, dict) else t for t in templates]
    providers = data.pop("providers", None)
    if isinstance(providers, dict):
        for name, asked in providers.items():
            extra = sorted(set(asked) - {"max_concurrent"}) if isinstance(asked, dict) else ["(not a table)"]
            if extra:
                raise PlanError(f"plan: [providers.{str(name)[:40]}] {', '.join(map(str, extra))[:80]}: only the "
                                "operator sets a provider's limits; a tenant's plan may ask for fewer slots for "
                                "its own tasks with max_concurrent")
        data["tenant_limits"] = providers
    elif providers is not None:
        data["tenant_limits"] = providers  # not a table: validation names it
    return data


def import_upload(settings: Settings, db: Database, storage: ObjectStorage, tenant_id: str,
                  request: ImportRequest, *, credits_per_second: float, max_tasks: int,
                  providers: Mapping[str, VideoProvider]) -> ImportSummary:
    """`reelqueue import` on an uploaded catalog, for `tenant_id`. A stop-the-import issue answers the
    summary too (status REJECTED), as the CLI prints it; the same file and plan again is the same import.
    ImportTooLarge, before anything is written, when it could make more than `max_tasks` tasks."""
    plan = plan_of(request, credits_per_second=credits_per_second)
    check_routes(plan, providers)
    with db.transaction() as session:
        asset = ready_asset(session, tenant_id, request.asset_id, kind="CATALOG")
        if asset is None:
            raise CatalogNotReady(request.asset_id)
        key, filename = asset.key, (asset.meta or {}).get("filename") or "catalog.csv"
    catalog = request.catalog or PurePosixPath(filename).stem
    if len(catalog) > CATALOG_NAME_CHARS:
        raise CatalogNameTooLong(f"catalog: the upload's file name makes a catalog name of {len(catalog)} characters "
                                 f"(at most {CATALOG_NAME_CHARS}); name the catalog with `catalog`")
    with tempfile.TemporaryDirectory(prefix="api-import-") as tmp:  # a local name of ours, never the tenant's
        path = storage.get_to_file(key, Path(tmp) / f"{request.asset_id}{PurePosixPath(key).suffix}")
        _check_size(path, plan, max_tasks)
        try:
            return run_import(settings, path, plan, catalog=catalog, check_urls=request.check_urls, tenant=tenant_id)
        except ImportRejected as exc:
            return exc.summary


def _check_size(path: Path, plan: Plan, max_tasks: int) -> None:
    """At most one task per valid product and combination: refused on that bound, before the import
    reads images or writes a row."""
    read = read_catalog(path, mapping=plan.catalog.columns, default_currency=plan.catalog.default_currency)
    products = sum(1 for _ in read.products)
    if products * plan.combinations > max_tasks:
        raise ImportTooLarge(products, plan.combinations, max_tasks)


def import_view(db: Database, tenant_id: str, import_id: str) -> ImportView | None:
    """The import of `tenant_id` (None for another tenant's, as for none)."""
    with db.transaction() as session:
        if not queries.import_exists(session, import_id, tenant_id):
            return None
        summary = import_summary(session, import_id)
        row = session.get(CatalogImport, import_id)
        summary.already_imported, summary.tasks_new, summary.tasks_reused = False, row.tasks_new, row.tasks_reused
        issues = session.scalars(select(ValidationIssue).where(ValidationIssue.import_id == import_id)
                                 .order_by(ValidationIssue.row.nulls_first(), ValidationIssue.id)
                                 .limit(SHOWN_ISSUES))
        shown = [{"row": i.row, "product_id": i.product_id, "field": i.field, "value": i.value,
                  "reason": i.reason, "action": i.action} for i in issues]
        counts = queries.status_counts(session, import_id)
    summary.report = summary.report_csv = None  # paths on the server's disk: the issues are here instead
    return ImportView(summary=summary, by_status=counts, issues=shown,
                      issues_total=sum(summary.issues_by_action.values()))


def owned_import_total(db: Database, tenant_id: str, import_id: str) -> int | None:
    """The import's task count if it belongs to `tenant_id`, else None."""
    with db.transaction() as session:
        if not queries.import_exists(session, import_id, tenant_id):
            return None
        return queries.count_tasks(session, import_id)


async def start_import_workflows(client: Client, db: Database, import_id: str, task_queue: str, *,
                                 on_start: Callable[[], None] | None = None) -> dict[str, int]:
    """Start every task's workflow, reading the tasks page by page (bounded memory at any size);
    `on_start` is told after each task (the CLI's progress bar)."""
    from control.starting import start_workflows

    return await start_workflows(client, queries.iter_tasks_to_start(db, import_id), import_id, task_queue,
                                 on_start=on_start)


async def cancel_import_tasks(client: Client, db: Database, import_id: str, reason: str, *, by: str,
                              statuses: Collection[str] | None = None,
                              on_done: Callable[[], None] | None = None) -> dict[str, int]:
    """Cancel every task of the import that has not ended (only those in `statuses`, when given),
    each the way `reelqueue cancel` does one; `on_done` is told after each (a progress bar)."""
    from control.cancel import cancel_task

    counts = {"cancel_requested": 0, "canceled": 0, "unchanged": 0}

    async def cancel_one(task: Row) -> None:
        outcome = await cancel_task(client, db, task.id, task.workflow_id, reason, by=by)
        key = {"cancel requested": "cancel_requested", "CANCELED": "canceled"}.get(outcome, "unchanged")
        counts[key] += 1
        if on_done is not None:
            on_done()

    await for_each(open_tasks(db, import_id, statuses), cancel_one, CANCEL_CONCURRENCY)
    return counts


def open_tasks(db: Database, import_id: str, statuses: Collection[str] | None = None) -> Iterator[Row]:
    """The import's tasks that have not ended (in `statuses`, when given), read page by page."""
    return (t for t in queries.iter_tasks_to_start(db, import_id)
            if t.status not in TERMINAL and (not statuses or t.status in statuses))


async def for_each(items: Iterable[T], act: Callable[[T], Awaitable[None]], concurrency: int) -> None:
    """`act` on every item, at most `concurrency` at a time; `items` is consumed lazily (a paged query)."""
    pending = iter(items)

    async def worker() -> None:
        for item in pending:  # one shared iterator: each item goes to exactly one worker
            await act(item)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
