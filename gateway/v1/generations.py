"""`/v1/generations`: create (Idempotency-Key, 202 + Location), read, list (cursor), cancel.

The business side is control/generations.py (create) and control/outbox.py (the start that follows
the commit); this module is HTTP only. Every query is scoped to the caller's tenant.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import re
import time
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Path, Query, Response
from pydantic import BaseModel
from sqlalchemy import and_, or_, select, text
from starlette.concurrency import run_in_threadpool

from contracts.task import TaskStatus
from control import generations
from control.cancel import cancel_task
from control.outbox import start_pending
from gateway.deps import GatewayDeps, gateway_deps
from gateway.problems import ProblemError
from gateway.tenancy import TenantDep
from schema.models import Asset, Task
from schema.state_machine import TERMINAL

log = logging.getLogger(__name__)
router = APIRouter(tags=["generations"])
DepsDep = Annotated[GatewayDeps, Depends(gateway_deps)]
MEDIA_KINDS = ("PROXY", "HLS", "THUMBNAIL", "RAW_OUTPUT")  # under the task's own key folder
KEY_RE = re.compile(r"^[\x21-\x7e]{1,255}$")  # printable ASCII, no blanks
LINK_TTL_S = 3600.0
MAX_CURSOR_CHARS = 200  # what _encode_cursor writes is about 90
GenerationId = Annotated[str, Path(pattern=r"^[0-9a-f]{32}$", description="a generation (task) id")]
BACKLOG_CACHE_S = 2.0
# The oldest wait for platform capacity: a start (an outbox row), or a provider slot (QUEUED since
# updated_at). A tenant's QUEUED tasks count only while it is below its own max_concurrent: at its
# limit they wait for the tenant's own tasks, which no other tenant's create should pay for. A task
# that generates holds its tenant's slot until its job succeeds: DISPATCHING up to RETRY_WAIT, and
# the waits for a person or a cancel in between.
_OLDEST_WAIT = text("""
SELECT least(
  (SELECT min(q.oldest)
     FROM (SELECT tenant_id, min(updated_at) AS oldest FROM tasks WHERE status = 'QUEUED' GROUP BY tenant_id) q
     LEFT JOIN tenants tn ON tn.id = q.tenant_id
    WHERE tn.max_concurrent IS NULL
       OR tn.max_concurrent > (SELECT count(*) FROM tasks b WHERE b.tenant_id = q.tenant_id AND b.status IN
            ('DISPATCHING', 'SUBMITTED', 'SUBMIT_UNKNOWN', 'RUNNING', 'RETRY_WAIT', 'NEEDS_ATTENTION',
             'CANCEL_REQUESTED'))),
  (SELECT min(created_at) FROM task_outbox WHERE started_at IS NULL)) AS oldest,
  now() AS now
""")


class GenerationAssetOut(BaseModel):
    kind: str
    url: str
    mime: str | None = None


class GenerationOut(BaseModel):
    id: str
    status: str
    attempts: int
    cost: float | None
    estimated_cost: float
    prompt: str
    provider: str
    model: str
    duration_s: float
    aspect_ratio: str
    import_id: str
    error: str | None = None
    created_at: str | None = None
    assets: list[GenerationAssetOut] = []
    outcome: str | None = None  # a cancel's outcome
    route_note: str | None = None  # the route of its latest attempt and why others were skipped (fallbacks)


class GenerationPageOut(BaseModel):
    items: list[GenerationOut]
    next_cursor: str | None = None


def _not_found(generation_id: str) -> ProblemError:
    return ProblemError(404, f"no generation {generation_id}", slug="not-found")


@router.post("/generations", status_code=202, response_model=GenerationOut,
             responses={409: {"description": "Idempotency-Key reused with another body"},
                        402: {"description": "not enough credit"}, 429: {"description": "over the request rate"},
                        503: {"description": "backlog too old, or the database unreachable: nothing written"}})
async def create_generation(body: generations.GenerationBody, principal: TenantDep, deps: DepsDep,
                            response: Response,
                            idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None) -> Any:
    """202 and `Location` once the task, its RESERVE and first state event are committed; the same
    key and body answer the first answer again, the same key with another body 409."""
    if idempotency_key is None or not KEY_RE.match(idempotency_key):
        raise ProblemError(400, "an Idempotency-Key header (1-255 printable characters) is required",
                           slug="idempotency-key-required")
    await run_in_threadpool(_check_backlog, deps)
    try:
        created = await run_in_threadpool(
            generations.create, deps.db, principal.tenant_id, idempotency_key, body,
            providers=deps.providers, credits_per_second=deps.api.credits_per_second)
    except generations.Refusal as refused:
        raise ProblemError(refused.status, refused.detail, slug=refused.slug) from None
    await _start(deps, created.task_id)
    response.status_code = created.status_code
    response.headers["Location"] = f"/v1/generations/{created.task_id}"
    if created.replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return created.body


@router.get("/generations/{generation_id}", response_model=GenerationOut)
def get_generation(generation_id: GenerationId, principal: TenantDep, deps: DepsDep) -> dict[str, Any]:
    """Status, attempts, cost, and the task's media as signed links."""
    with deps.db.transaction() as session:
        task = _owned(session, principal.tenant_id, generation_id)
        cost = generations.charged(session, task.id)
        media = list(session.scalars(select(Asset).where(Asset.task_id == task.id, Asset.tenant_id == task.tenant_id,
                                                         Asset.kind.in_(MEDIA_KINDS)).order_by(Asset.kind)))
        note = generations.route_note(session, task.id)
    return {**generations.generation_view(task, cost=cost, assets=_links(deps, media)), "route_note": note}


@router.get("/generations", response_model=GenerationPageOut)
def list_generations(principal: TenantDep, deps: DepsDep,
                     status: Annotated[str | None, Query(max_length=40, pattern=r"^[A-Z_]+$")] = None,
                     import_id: Annotated[str | None, Query(pattern=r"^imp_[0-9a-f]{20}$")] = None,
                     cursor: Annotated[str | None, Query(max_length=MAX_CURSOR_CHARS,
                                                         pattern=r"^[A-Za-z0-9_-]+$")] = None,
                     limit: Annotated[int, Query(ge=1, le=100)] = 50) -> dict[str, Any]:
    """The tenant's tasks, newest first, `limit` at a time; `next_cursor` fetches the next page."""
    stmt = select(Task).where(Task.tenant_id == principal.tenant_id)
    if status is not None:
        if status not in TaskStatus.__members__:
            raise ProblemError(400, f"unknown status {status[:40]!r}", slug="bad-filter")
        stmt = stmt.where(Task.status == status)
    if import_id is not None:
        stmt = stmt.where(Task.import_id == import_id)
    if cursor is not None:
        at, after_id = _decode_cursor(cursor)
        stmt = stmt.where(or_(Task.created_at < at, and_(Task.created_at == at, Task.id < after_id)))
    with deps.db.transaction() as session:
        rows = list(session.scalars(stmt.order_by(Task.created_at.desc(), Task.id.desc()).limit(limit + 1)))
    items = [generations.generation_view(t, cost=None, assets=[]) for t in rows[:limit]]
    last = rows[limit - 1] if len(rows) > limit else None
    return {"items": items, "next_cursor": _encode_cursor(last.created_at, last.id) if last else None}


@router.post("/generations/{generation_id}/cancel", status_code=202, response_model=GenerationOut)
async def cancel_generation(generation_id: GenerationId, principal: TenantDep, deps: DepsDep) -> dict[str, Any]:
    """The CLI's cancel path: the workflow finishes its step, stops the job, closes the ledger. A
    task whose workflow was not started yet is started first, so that the same path ends it."""
    task = await run_in_threadpool(_read_owned, deps, principal.tenant_id, generation_id)
    if TaskStatus(task.status) in TERMINAL:
        outcome = f"already {task.status}"
    else:
        await _start(deps, task.id)
        try:
            client = await deps.temporal.get()
            outcome = await cancel_task(client, deps.db, task.id, task.workflow_id, "cancelled through the API",
                                        by="api")  # an import's task never run is ended here
        except (RuntimeError, OSError) as exc:
            raise ProblemError(503, "the workflow service is unreachable; try again", slug="temporal-unavailable",
                               headers={"Retry-After": "5"}) from exc
    task = await run_in_threadpool(_read_owned, deps, principal.tenant_id, generation_id)
    return {**generations.generation_view(task, cost=None, assets=[]), "outcome": outcome}


async def _start(deps: GatewayDeps, task_id: str) -> None:
    """Start the task's workflow now; on any failure the outbox row stays pending for the sweeper."""
    if deps.temporal is None:
        return
    try:
        client = await asyncio.wait_for(deps.temporal.get(), 5.0)
        await start_pending(deps.db, client, deps.task_queue, task_ids=[task_id])
    except Exception:  # noqa: BLE001 - committed already: the sweeper starts it
        log.warning("start of %s left to the outbox sweeper", task_id, exc_info=True)


def _read_owned(deps: GatewayDeps, tenant_id: str, generation_id: str) -> Task:
    with deps.db.transaction() as session:
        return _owned(session, tenant_id, generation_id)


def _owned(session, tenant_id: str, generation_id: str) -> Task:  # noqa: ANN001 - Session
    task = session.scalar(select(Task).where(Task.id == generation_id, Task.tenant_id == tenant_id))
    if task is None:
        raise _not_found(generation_id)
    return task


def _links(deps: GatewayDeps, media: list[Asset]) -> list[dict[str, Any]]:
    if deps.links is None:
        return []
    return [{"kind": a.kind, "url": deps.links.link(a.key, LINK_TTL_S).url, "mime": a.mime} for a in media]


def _check_backlog(deps: GatewayDeps) -> None:
    """503 while the oldest task waiting for platform capacity is older than the limit (read at most
    every 2 s)."""
    limit = deps.api.backlog_max_age_s
    if limit <= 0:
        return
    read_at, age = deps.api.backlog_read
    if time.monotonic() - read_at > BACKLOG_CACHE_S:
        with deps.db.transaction() as session:
            row = session.execute(_OLDEST_WAIT).one()
        age = (row.now - row.oldest).total_seconds() if row.oldest else 0.0
        deps.api.backlog_read = (time.monotonic(), age)
    if age > limit:
        raise ProblemError(503, f"the backlog's oldest task has waited {age:.0f} s (limit {limit:.0f} s); "
                                "nothing was written, try again later", slug="backlog-too-old",
                           headers={"Retry-After": "30"})


def _encode_cursor(at: datetime, task_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([at.isoformat(), task_id]).encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The position a cursor names; 400 for anything _encode_cursor did not write: a flat list of
    two strings, a time with its zone and a task id (valid base64 of `["...", "\\u0000"]` is still
    the tenant's text: its id reached Postgres as it was)."""
    try:
        decoded = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        if decoded.count(b"[") != 1:
            raise ValueError("not a flat list")
        at, task_id = json.loads(decoded)
        if not isinstance(at, str) or not isinstance(task_id, str) or not re.fullmatch(r"[0-9a-f]{32}", task_id):
            raise TypeError("not a time and a task id")
        when = datetime.fromisoformat(at)
        if when.tzinfo is None:
            raise ValueError("no time zone")
        return when, task_id
    except (ValueError, TypeError, binascii.Error, RecursionError) as exc:
        raise ProblemError(400, "the cursor is not one this API gave", slug="bad-cursor") from exc
