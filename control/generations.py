"""Generations of the tenant API: one request becomes one task of the same tables and state machine
as an imported one, and runs the same GenerationWorkflow through the same start path.

Each tenant has one API import (catalog `api:generations`, a one-template plan of its own, made on
the first create); each generation is a product of that import and its one task, so the composite
keys of migration 0007 hold unchanged. One transaction writes the task, its first state event, its
RESERVE (`reserve:{task}`, the key the workflow's reserve step finds already written), its outbox
row and its idempotency record; the workflow start follows the commit (control/outbox.py starts
what a gateway did not).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy import func, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from activities.ledger import available_credit
from activities.tasks import route_problem
from adapters.providers.base import VideoProvider
from catalog.expand import canonical_json, sha256_text, task_id_for
from catalog.importer import import_id_for
from catalog.plan import SUPPORTED_RATIOS, Plan, Template
from contracts.admission import PriorityClass
from contracts.routing import MAX_FALLBACKS, Route
from contracts.task import TaskEvent, TaskStatus, rounds_to_nothing
from contracts.tenant_text import is_blank
from contracts.workflow_api import workflow_id
from schema.db import Database, bound_lock_waits
from schema.import_scope import API_CATALOG
from schema.models import (
    Asset,
    Attempt,
    CatalogImport,
    CreditEntry,
    IdempotencyRecord,
    Product,
    StateEvent,
    Task,
    TaskOutbox,
)
from schema.models import Plan as PlanRow

API_TEMPLATE = "api"
# Fields a request names only when it asks for them: a request without them hashes as it did before them
_OPTIONS = ("fallbacks", "lock_model", "priority")
API_LOCALE = "en"
SOURCE = "api"
CENT = Decimal("0.000001")
CREATE_LOCK_TIMEOUT_S = 5.0  # a create waits this long for a lock (the ledger locked) before answering 503


class GenerationBody(BaseModel):
    """What a client asks for. Normalised (`normalised`) before it is hashed for idempotency."""

    model_config = ConfigDict(extra="forbid")
    prompt: str = Field(min_length=1, max_length=2000)
    image_asset_id: str = Field(min_length=1, max_length=64)
    provider: str = Field(default="emulator", min_length=1, max_length=64)
    model: str = Field(default="emu-motion-1", min_length=1, max_length=100)
    duration_s: float = Field(default=2.0, gt=0, le=600)
    aspect_ratio: Literal["9:16", "16:9", "1:1"] = "9:16"
    # Routes after the primary, tried in order when it cannot take an attempt (docs/architecture.md, "Routing")
    fallbacks: list[Route] | None = Field(default=None, max_length=MAX_FALLBACKS)
    lock_model: bool = False  # true: no route but the primary
    priority: PriorityClass = PriorityClass.INTERACTIVE  # "bulk": behind the tenant's interactive work

    @field_validator("fallbacks")
    @classmethod
    def _distinct(cls, fallbacks: list[Route] | None) -> list[Route] | None:
        if fallbacks and len(set(fallbacks)) < len(fallbacks):
            raise ValueError("a route is named twice")
        return fallbacks or None

    @field_validator("prompt")
    @classmethod
    def _prompt(cls, prompt: str) -> str:
        if is_blank(prompt):
            raise ValueError("the prompt is empty (white space and invisible characters only)")
        return prompt

    @field_validator("duration_s")
    @classmethod
    def _milliseconds(cls, duration_s: float) -> float:
        """Kept to the millisecond: the task, its reservation and the request's hash see one value."""
        if rounds_to_nothing(duration_s):
            raise ValueError("the duration is shorter than a millisecond")
        return round(duration_s, 3)

    def normalised(self) -> dict[str, Any]:
        """Equal requests hash equal: surrounding blanks and runs of blanks in the prompt do not
        count, nor the spelling of the duration (2, 2.0, 2.0001: kept to the millisecond)."""
        asked = self.model_dump(mode="json", exclude_defaults=True, include=set(_OPTIONS))  # absent: as before
        return {**self.model_dump(exclude=set(_OPTIONS)), **asked, "prompt": " ".join(self.prompt.split())}

    def sha256(self) -> str:
        return sha256_text(canonical_json(self.normalised()))


class Refusal(Exception):
    """A create the API refuses: answered as problem+json with `slug` (gateway/v1/generations.py)."""

    def __init__(self, status: int, slug: str, detail: str):
        super().__init__(detail)
        self.status, self.slug, self.detail = status, slug, detail


class Created(BaseModel):
    status_code: int
    body: dict[str, Any]
    replayed: bool = False
    task_id: str


def api_plan(tenant_id: str) -> Plan:
    """The tenant's API plan: one template whose task rows carry the request's own provider, model,
    duration and ratio (the plan gives deadlines and review, both defaults: no review)."""
    return Plan(name=f"api:{tenant_id}", locales=[API_LOCALE], aspect_ratios=list(SUPPORTED_RATIOS),
                templates=[Template(id=API_TEMPLATE, version="api-v1", cost_estimate=Decimal(0),
                                    prompts={API_LOCALE: "{title}"})])


def create(db: Database, tenant_id: str, key: str, body: GenerationBody, *,
           providers: Mapping[str, VideoProvider], credits_per_second: float) -> Created:
    """One create; a repeated key answers the first answer again (409 if the body differs)."""
    request_sha = body.sha256()
    with db.transaction() as session:
        seen = session.get(IdempotencyRecord, (tenant_id, key))
        if seen is not None:
            return _replay(seen, request_sha)
    _check_routes(body, providers)
    cost = server_price(body.duration_s, credits_per_second)
    try:
        with db.transaction() as session:
            bound_lock_waits(session, CREATE_LOCK_TIMEOUT_S)  # the RESERVE row: a locked ledger refuses, 503
            return _create_in(session, tenant_id, key, body, request_sha, cost)
    except IntegrityError:  # a concurrent duplicate committed first: the unique keys are the last line
        with db.transaction() as session:
            seen = session.get(IdempotencyRecord, (tenant_id, key))
        if seen is None:
            raise
        return _replay(seen, request_sha)


def _check_routes(body: GenerationBody, providers: Mapping[str, VideoProvider]) -> None:
    """The primary route, and each fallback, can make this video here: 422 naming the route otherwise (a
    fallback is tried only when the primary fails, too late to find a typo)."""
    for field, route in [("", Route(provider=body.provider, model=body.model)),
                         *((f"fallbacks[{i}]: ", r) for i, r in enumerate(body.fallbacks or []))]:
        problem = route_problem(route.provider, providers.get(route.provider), route.model, body.duration_s,
                                body.aspect_ratio)
        if problem:
            raise Refusal(422, "unsupported-route", f"{field}{problem}")


def server_price(duration_s: float | Decimal, credits_per_second: float) -> Decimal:
    """What the server reserves for a video of `duration_s` from a tenant (a generation, a task of an
    imported plan): its duration at the operator's rate, whatever the tenant wrote."""
    return (Decimal(str(duration_s)) * Decimal(str(credits_per_second))).quantize(CENT)


def _replay(seen: IdempotencyRecord, request_sha: str) -> Created:
    if seen.request_sha256 != request_sha:
        raise Refusal(409, "idempotency-key-reused",
                      "this Idempotency-Key was used with another request body; use a new key for a new request")
    return Created(status_code=seen.response_status, body=seen.response_body, replayed=True, task_id=seen.task_id)


def _create_in(session: Session, tenant_id: str, key: str, body: GenerationBody, request_sha: str,
               cost: Decimal) -> Created:
    available = available_credit(session, tenant_id)  # locks the tenant row: one create of a tenant at a time
    seen = session.get(IdempotencyRecord, (tenant_id, key))
    if seen is not None:  # a duplicate that waited for the lock
        return _replay(seen, request_sha)
    image = usable_image(session, tenant_id, body.image_asset_id)
    if image is None:
        raise Refusal(422, "unknown-asset", f"no usable image asset {body.image_asset_id} (it must be READY)")
    if available < cost:
        raise Refusal(402, "insufficient-credit", f"this generation reserves {cost} credits; {available} are left")
    import_id, plan_id = _api_import(session, tenant_id)
    identity = {"tenant": tenant_id, "catalog": API_CATALOG, "idempotency_key": key}
    task_id = task_id_for(identity)
    prompt = " ".join(body.prompt.split())
    data = {"prompt": prompt, "request": body.normalised()}
    product_ref = session.scalar(insert(Product).values(
        import_id=import_id, tenant_id=tenant_id, plan_id=plan_id, product_id=task_id, title=prompt[:200],
        description="", image_url=None, image_asset_id=image.id, data=data,
        content_sha256=sha256_text(canonical_json(data)),
    ).returning(Product.id))
    now = datetime.now(UTC)
    session.execute(insert(Task).values(
        id=task_id, tenant_id=tenant_id, identity=json.loads(canonical_json(identity)), import_id=import_id,
        plan_id=plan_id, product_ref=product_ref, product_id=task_id, template_id=API_TEMPLATE,
        template_version="api-v1", locale=API_LOCALE, aspect_ratio=body.aspect_ratio, variant="default",
        prompt=prompt, overlay={}, prompt_sha256=sha256_text(prompt), image_sha256=image.sha256,
        image_asset_id=image.id, duration_s=Decimal(str(body.duration_s)), provider=body.provider, model=body.model,
        estimated_cost=cost, status=TaskStatus.CREATED.value, version=0, progress=0, current_attempt_no=0,
        workflow_id=workflow_id(task_id), created_at=now, updated_at=now,
    ))
    session.execute(insert(StateEvent).values(
        task_id=task_id, source=SOURCE, source_event_id=f"{task_id}:created", event=TaskEvent.CREATED.value,
        from_status=TaskStatus.CREATED.value, to_status=TaskStatus.CREATED.value, task_version=0, applied=True,
        payload={"idempotency_key": key},
    ))
    session.execute(insert(CreditEntry).values(tenant_id=tenant_id, task_id=task_id, entry_type="RESERVE",
                                               amount=cost, business_key=f"reserve:{task_id}", run_no=1))
    session.execute(insert(TaskOutbox).values(task_id=task_id, tenant_id=tenant_id))
    session.execute(update(CatalogImport).where(CatalogImport.id == import_id).values(
        tasks=CatalogImport.tasks + 1, tasks_new=CatalogImport.tasks_new + 1, products=CatalogImport.products + 1,
        rows=CatalogImport.rows + 1))
    answer = generation_view(session.get(Task, task_id), cost=None, assets=[])
    session.add(IdempotencyRecord(tenant_id=tenant_id, key=key, request_sha256=request_sha, task_id=task_id,
                                  response_status=202, response_body=answer))
    session.flush()
    return Created(status_code=202, body=answer, task_id=task_id)


def usable_image(session: Session, tenant_id: str, asset_id: str) -> Asset | None:
    """An input image of this tenant (another tenant's is as unknown as a missing one)."""
    return session.scalar(select(Asset).where(Asset.id == asset_id, Asset.tenant_id == tenant_id,
                                              Asset.kind == "INPUT_IMAGE"))


def _api_import(session: Session, tenant_id: str) -> tuple[str, str]:
    """The tenant's API import and plan, written on first use (idempotent: ids from content)."""
    plan = api_plan(tenant_id)
    import_id = import_id_for(tenant_id, API_CATALOG, "", plan.plan_id)
    if session.get(CatalogImport, import_id) is None:
        session.execute(pg_insert(PlanRow).values(id=plan.plan_id, tenant_id=tenant_id, name=plan.name,
                                                  content=plan.model_dump(mode="json"))
                        .on_conflict_do_nothing(index_elements=["id"]))
        session.execute(pg_insert(CatalogImport).values(
            id=import_id, tenant_id=tenant_id, catalog=API_CATALOG, version=1, file_name="", file_sha256="",
            raw_key="", detected_format="api", plan_id=plan.plan_id, status="ACCEPTED",
        ).on_conflict_do_nothing(index_elements=["id"]))
    return import_id, plan.plan_id


def generation_view(task: Task, *, cost: Decimal | None, assets: list[dict[str, Any]]) -> dict[str, Any]:
    """What GET /v1/generations/{id} answers (and the create's 202 body, with no cost or assets yet)."""
    return {
        "id": task.id, "status": task.status, "attempts": task.current_attempt_no,
        "cost": float(cost) if cost is not None else None, "estimated_cost": float(task.estimated_cost),
        "prompt": task.prompt, "provider": task.provider, "model": task.model,
        "duration_s": float(task.duration_s), "aspect_ratio": task.aspect_ratio, "import_id": task.import_id,
        "error": task.last_error, "created_at": task.created_at.isoformat() if task.created_at else None,
        "assets": assets,
    }


def route_note(session: Session, task_id: str) -> str | None:
    """Why the task's latest attempt went where it did (a task with fallback routes), else None."""
    return session.scalar(select(Attempt.route_note).where(Attempt.task_id == task_id)
                          .order_by(Attempt.attempt_no.desc()).limit(1))


def charged(session: Session, task_id: str) -> Decimal | None:
    """What the task was charged so far (settled plus adjustments), None while nothing is."""
    return session.scalar(select(func.sum(CreditEntry.amount)).where(
        CreditEntry.task_id == task_id, CreditEntry.entry_type.in_(("SETTLE", "ADJUSTMENT"))))
