"""/v1/generations on the real stack: two tenants, idempotent creates under concurrency, the task
through the same workflow to SUCCEEDED, 404 isolation, credit 402, the start outbox and its
sweeper, cancel, and the 503s that write nothing (a backlog too old, Postgres gone mid-create)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from asgi_server import serving
from sqlalchemy import event, func, select, text

from adapters.providers import build_providers
from adapters.storage import ObjectStorage
from adapters.temporal_client import connect
from catalog.images import ImageOutcome, image_key, record_image_asset
from config.settings import Settings
from control.outbox import run_sweeper, start_pending
from delivery.links import LinkSigner
from gateway.app import create_app
from gateway.deps import ApiLimits, GatewayDeps, TemporalConnection
from reelqueue_client import ApiProblem, GenerationRequest, ReelqueueClient
from schema import tenants
from schema.db import Database
from schema.models import CreditEntry, IdempotencyRecord, StateEvent, Task, TaskOutbox

IMAGE = Path(__file__).resolve().parents[2] / "examples" / "images" / "aurora-lamp.png"
pytestmark = pytest.mark.timeout(180)


def _tenant(db: Database, credits: int = 1000, max_concurrent: int = 10) -> tuple[str, str]:
    tenant_id = f"api-{uuid.uuid4().hex[:10]}"
    limits = tenants.TenantLimits(credits=Decimal(credits), max_concurrent=max_concurrent)
    with db.transaction() as session:
        issued = tenants.create_tenant(session, tenant_id, limits)
    return tenant_id, issued.api_key


def _image(stack: Settings, db: Database, tenant_id: str) -> str:
    """An INPUT_IMAGE of the tenant, stored as the import stores one."""
    data = IMAGE.read_bytes()
    storage = ObjectStorage.from_settings(stack)
    stored = storage.put_bytes(image_key(tenant_id, "x", "image/png").replace("/x", "/" + uuid.uuid4().hex), data,
                               "image/png")
    outcome = ImageOutcome(source="test", sha256=stored.sha256, size=len(data), content_type="image/png",
                           key=stored.key)
    with db.transaction() as session:
        return record_image_asset(session, storage.bucket, tenant_id, outcome).id


@contextmanager
def gateway(stack: Settings, queue: str | None, *, db: Database | None = None, **api: float) -> Iterator[str]:
    """The real gateway app on a free port; its workflows start on `queue` (None: never started). The
    backlog check is off unless asked for: it is platform-wide, and the suite's other tests leave
    QUEUED tasks behind."""
    api = {"backlog_max_age_s": 0.0, **api}
    deps = GatewayDeps(
        db=db or Database(stack.database_url), providers=build_providers(stack), signaler=None,
        temporal=TemporalConnection(lambda: connect(stack))
        if queue else None,
        task_queue=queue or "nowhere", links=LinkSigner.from_settings(stack), api=ApiLimits(**api),
    )
    with serving(create_app(deps, settings=stack)) as port:
        yield f"http://127.0.0.1:{port}"


def _count(db: Database, model, **where) -> int:  # noqa: ANN001
    with db.transaction() as session:
        return session.scalar(select(func.count()).select_from(model).filter_by(**where))


async def _until(api: ReelqueueClient, gen_id: str, statuses: set[str], timeout_s: float = 90):  # noqa: ANN202
    deadline = time.monotonic() + timeout_s
    while True:
        gen = await asyncio.to_thread(api.get_generation, gen_id)
        if gen.status in statuses or time.monotonic() > deadline:
            return gen
        await asyncio.sleep(0.5)


@pytest.fixture(scope="module")
def db(stack: Settings) -> Database:
    return Database(stack.database_url)


async def test_idempotent_create_runs_to_succeeded_and_other_tenants_see_404(stack: Settings, db: Database,
                                                                            task_queue: str) -> None:
    tenant_a, key_a = _tenant(db)
    tenant_b, key_b = _tenant(db)
    image_a = _image(stack, db, tenant_a)
    body = GenerationRequest(prompt="A lamp  on a desk, slow pan", image_asset_id=image_a, duration_s=2)
    with gateway(stack, task_queue) as base:
        a, b = ReelqueueClient(base, key_a), ReelqueueClient(base, key_b)
        idem = f"order-{uuid.uuid4().hex}"
        with ThreadPoolExecutor(20) as pool:
            answers = list(pool.map(lambda _: a.create_generation(body, idempotency_key=idem), range(20)))
        assert {g.id for g in answers} == {answers[0].id}
        gen_id = answers[0].id
        assert _count(db, Task, id=gen_id) == 1
        assert _count(db, CreditEntry, task_id=gen_id, entry_type="RESERVE") == 1
        assert _count(db, IdempotencyRecord, tenant_id=tenant_a, key=idem) == 1
        with db.transaction() as session:
            first = session.scalars(select(StateEvent).where(StateEvent.task_id == gen_id)
                                    .order_by(StateEvent.id)).first()
        assert (first.event, first.to_status, first.source) == ("created", "CREATED", "api")

        raw = httpx.post(f"{base}/v1/generations", headers={**a.headers, "Idempotency-Key": idem},
                         json=body.model_dump(mode="json") | {"prompt": "  A lamp on a desk,   slow pan "})
        assert raw.status_code == 202 and raw.headers["idempotent-replayed"] == "true"  # the same, normalised
        assert raw.headers["location"] == f"/v1/generations/{gen_id}"
        with pytest.raises(ApiProblem) as reused:
            a.create_generation(body.model_copy(update={"prompt": "another video"}), idempotency_key=idem)
        assert (reused.value.status, reused.value.slug) == (409, "idempotency-key-reused")
        missing_key = httpx.post(f"{base}/v1/generations", headers=a.headers, json=body.model_dump(mode="json"))
        assert missing_key.status_code == 400 and missing_key.headers["content-type"] == "application/problem+json"
        bad = httpx.post(f"{base}/v1/generations", headers={**a.headers, "Idempotency-Key": "bad-body"},
                         json={"prompt": "x", "image_asset_id": image_a, "aspect_ratio": "4:3", "colour": "red"})
        problem = bad.json()
        assert (bad.status_code, problem["type"]) == (400, "urn:reelqueue:problem:invalid-request")
        assert "aspect_ratio" in problem["detail"] and "colour" in problem["detail"]

        done = await _until(a, gen_id, {"SUCCEEDED", "FAILED_FINAL", "INVALID", "CANCELED"})
        assert done.status == "SUCCEEDED", done
        assert done.attempts == 1 and done.cost == pytest.approx(2.0)
        kinds = {asset.kind: asset.url for asset in done.assets}
        assert {"PROXY", "THUMBNAIL"} <= set(kinds)
        assert httpx.get(kinds["PROXY"], timeout=10).status_code == 200
        with db.transaction() as session:
            ledger = dict(session.execute(select(CreditEntry.entry_type, func.sum(CreditEntry.amount))
                                          .where(CreditEntry.task_id == gen_id).group_by(CreditEntry.entry_type)).all())
        assert ledger["RESERVE"] == ledger["SETTLE"] + ledger.get("RELEASE", 0)

        # tenant B: A's generation does not exist for it, whatever the route
        for call in (lambda: b.get_generation(gen_id), lambda: b.cancel_generation(gen_id)):
            with pytest.raises(ApiProblem) as hidden:
                call()
            assert (hidden.value.status, hidden.value.slug) == (404, "not-found")
        assert b.list_generations().items == []
        assert b.list_generations(import_id=done.import_id).items == []
        with pytest.raises(ApiProblem) as foreign_image:
            b.create_generation(body)
        assert (foreign_image.value.status, foreign_image.value.slug) == (422, "unknown-asset")

        second = a.create_generation(body.model_copy(update={"prompt": "second"}))
        page = a.list_generations(limit=1)
        assert [g.id for g in page.items] == [second.id] and page.next_cursor
        assert [g.id for g in a.list_generations(limit=1, cursor=page.next_cursor).items] == [gen_id]
        assert [g.id for g in a.list_generations(status="SUCCEEDED").items] == [gen_id]
        cancelled = a.cancel_generation(second.id)
        assert cancelled.id == second.id
        assert (await _until(a, second.id, {"CANCELED"})).status == "CANCELED"


async def test_credit_refusal_and_a_create_left_unstarted_is_started_by_the_sweeper(
        stack: Settings, db: Database, client, task_queue: str) -> None:
    tenant, key = _tenant(db, credits=3)
    image = _image(stack, db, tenant)
    with gateway(stack, None) as base:  # a gateway that cannot start workflows (Temporal away)
        api = ReelqueueClient(base, key)
        with pytest.raises(ApiProblem) as poor:
            api.create_generation(GenerationRequest(prompt="p", image_asset_id=image, duration_s=5))
        assert (poor.value.status, poor.value.slug) == (402, "insufficient-credit")
        assert _count(db, Task, tenant_id=tenant) == 0 and _count(db, IdempotencyRecord, tenant_id=tenant) == 0

        gen = api.create_generation(GenerationRequest(prompt="p", image_asset_id=image, duration_s=2))
        assert gen.status == "CREATED"
    with db.transaction() as session:
        assert session.get(TaskOutbox, gen.id).started_at is None

    with gateway(stack, task_queue, backlog_max_age_s=0.5) as base:  # the unstarted task is now a stale backlog
        api = ReelqueueClient(base, key)
        await asyncio.sleep(0.6)
        with pytest.raises(ApiProblem) as busy:
            api.create_generation(GenerationRequest(prompt="q", image_asset_id=image, duration_s=1))
        assert (busy.value.status, busy.value.slug) == (503, "backlog-too-old")
        assert int(busy.value.headers["retry-after"]) > 0
        assert _count(db, Task, tenant_id=tenant) == 1

        stop = asyncio.Event()  # the worker's sweeper, as worker.py runs it (no age: the row is ours)
        sweeper = asyncio.create_task(run_sweeper(db, client, task_queue, stop, every_s=0.2, min_age_s=0.0))
        try:
            for _ in range(100):
                with db.transaction() as session:
                    if session.get(TaskOutbox, gen.id, populate_existing=True).started_at is not None:
                        break
                await asyncio.sleep(0.1)
        finally:
            stop.set()
            await sweeper
        again = await start_pending(db, client, task_queue, task_ids=[gen.id])
        assert sum(again.values()) == 0  # marked: the next sweep leaves it alone
        await client.get_workflow_handle(f"gen-{gen.id}").describe()  # it exists
        done = await _until(api, gen.id, {"SUCCEEDED", "FAILED_FINAL", "INVALID"})
        assert done.status == "SUCCEEDED"


async def test_a_tenant_over_its_concurrency_waits_queued_for_its_own_slot(stack: Settings, db: Database,
                                                                         task_queue: str) -> None:
    tenant, key = _tenant(db, max_concurrent=1)
    image = _image(stack, db, tenant)
    with gateway(stack, task_queue) as base:
        api = ReelqueueClient(base, key)
        first, second = (api.create_generation(GenerationRequest(prompt=p, image_asset_id=image, duration_s=1))
                         for p in ("first", "second"))
        for gen in (first, second):
            assert (await _until(api, gen.id, {"SUCCEEDED", "FAILED_FINAL", "INVALID"})).status == "SUCCEEDED"
    first_at = select(StateEvent.task_id, func.min(StateEvent.created_at)).group_by(StateEvent.task_id)
    with db.transaction() as session:
        at = dict(session.execute(first_at.where(StateEvent.event == "dispatch_claimed")).all())
        done = dict(session.execute(first_at.where(StateEvent.to_status == "OUTPUT_FETCHING")).all())
    earlier, later = sorted((first.id, second.id), key=lambda t: at[t])
    assert at[later] >= done[earlier]  # the second generated only once the first's job had succeeded


def test_postgres_gone_during_a_create_answers_503_and_writes_nothing(stack: Settings, db: Database) -> None:
    tenant, key = _tenant(db)
    image = _image(stack, db, tenant)
    doomed = Database(f"{stack.database_url}?application_name=api-create-drop")

    def drop_connection(conn, cursor, statement, *_) -> None:  # noqa: ANN001
        """The moment the RESERVE is about to be written, Postgres drops this connection."""
        if statement.lstrip().startswith("INSERT INTO credit_ledger"):
            pid = conn.connection.dbapi_connection.info.backend_pid
            with db.transaction() as admin:
                admin.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})

    event.listen(doomed.engine, "before_cursor_execute", drop_connection)
    try:
        with gateway(stack, None, db=doomed) as base:
            resp = httpx.post(f"{base}/v1/generations", headers={"Authorization": f"Bearer {key}",
                                                                 "Idempotency-Key": "k-1"},
                              json={"prompt": "p", "image_asset_id": image}, timeout=30)
    finally:
        event.remove(doomed.engine, "before_cursor_execute", drop_connection)
    assert resp.status_code == 503, resp.text
    assert resp.json()["type"] == "urn:reelqueue:problem:database-unavailable"
    assert resp.headers["x-request-id"]
    for model in (Task, IdempotencyRecord, TaskOutbox, CreditEntry):
        assert _count(db, model, tenant_id=tenant) == 0, model.__name__
