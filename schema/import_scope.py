"""Which tasks an import covers: those it created (`tasks.import_id`, indexed) and those it reused
(`import_tasks`, which holds links for reused tasks only: a link row per new task cost the import
a row, an index entry and two foreign-key checks per task, see docs/performance.md)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, CompoundSelect, or_, select, union_all
from sqlalchemy.orm import Session

from contracts.admission import PriorityClass
from schema.models import CatalogImport, ImportTask, Plan, Product, Task

API_CATALOG = "api:generations"  # the catalog of a tenant's API import (control/generations.py)


def import_task_ids(import_id: str) -> CompoundSelect:
    """The ids of the import's tasks, created or reused (a task is one or the other for an import)."""
    return union_all(select(Task.id).where(Task.import_id == import_id),
                     select(ImportTask.task_id).where(ImportTask.import_id == import_id))


def in_import(import_id: str) -> ColumnElement[bool]:
    """WHERE clause on `Task`: the task belongs to the import."""
    return Task.id.in_(import_task_ids(import_id))


def import_paused_by(session: Session, task: Task) -> str | None:
    """Who paused an import that covers the task (`reelqueue pause`), or None when none is paused."""
    linked = select(ImportTask.import_id).where(ImportTask.task_id == task.id)
    return session.scalar(select(CatalogImport.paused_by).where(
        CatalogImport.paused_by.is_not(None),
        or_(CatalogImport.id == task.import_id, CatalogImport.id.in_(linked))).limit(1))


def api_request(session: Session, task: Task) -> dict[str, Any] | None:
    """What a generation of the tenant API asked for (its request, as its product keeps it); None for an
    imported task. Told apart by the import that created the task, which no tenant can choose: a plan
    may name its catalog and templates as it likes, the API's included, but only the API's import has
    no file (an imported file always has a hash)."""
    api_import = session.scalar(select(CatalogImport.id).where(
        CatalogImport.id == task.import_id, CatalogImport.catalog == API_CATALOG, CatalogImport.file_sha256 == ""))
    if api_import is None:
        return None
    data = session.scalar(select(Product.data).where(Product.id == task.product_ref)) or {}
    return data.get("request") or {}


def task_priority(session: Session, task: Task) -> PriorityClass:
    """The task's class, read from the database (`priority_of` its API request, or its plan's `priority`)."""
    asked = api_request(session, task)
    named = None if asked is not None else session.scalar(
        select(Plan.content["priority"].as_string()).where(Plan.id == task.plan_id))
    return priority_of(asked, PriorityClass(named) if named else None)


def priority_of(asked: dict[str, Any] | None, plan_priority: PriorityClass | None) -> PriorityClass:
    """A generation of the tenant API (`asked`: its request) is interactive unless it asked for bulk; an
    imported task is bulk unless its plan (an operator's: /v1/imports refuses a tenant's) says interactive."""
    if asked is None:
        return plan_priority or PriorityClass.BULK
    return PriorityClass.BULK if asked.get("priority") == PriorityClass.BULK.value else PriorityClass.INTERACTIVE
