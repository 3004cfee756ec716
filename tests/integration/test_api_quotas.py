"""Tenant quotas and caps that hold under concurrency, on the real stack: the pending-uploads quota
and the request rate against many parallel calls, the /v1 body cap against a chunked body, the tasks
one import may expand to, open event streams per tenant, a revoked key's open stream, and the
backlog guard that counts only what waits for the platform (not for a tenant's own limit)."""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from api_helpers import api_server
from sqlalchemy import func, select, update
from stack_helpers import make_catalog, make_plan

from catalog.plan import load_plan
from catalog.service import run_import
from config.settings import Settings
from contracts.task import TaskEvent
from reelqueue_client import ApiProblem, GenerationRequest, ReelqueueClient
from reelqueue_client.transfer import start_upload, upload
from schema import task_store, tenants
from schema.db import Database
from schema.models import CatalogImport, Task, Upload
from schema.state_machine import TERMINAL

PNG = (Path(__file__).resolve().parents[2] / "examples" / "images" / "aurora-lamp.png").read_bytes()
PNG_SHA = hashlib.sha256(PNG).hexdigest()


def _tenant(stack: Settings, **limits) -> tuple[str, str]:  # noqa: ANN003
    """A tenant with `limits` (TenantLimits fields) and its key."""
    tenant_id = f"q-{uuid.uuid4().hex[:10]}"
    with Database(stack.database_url).transaction() as session:
        issued = tenants.create_tenant(session, tenant_id, tenants.TenantLimits(**limits))
    return tenant_id, issued.api_key


def _pending(stack: Settings, tenant_id: str) -> int:
    with Database(stack.database_url).transaction() as session:
        return session.scalar(select(func.count()).select_from(Upload)
                              .where(Upload.tenant_id == tenant_id, Upload.status == "PENDING"))


def _statuses(calls: Iterator) -> list[int]:  # noqa: ANN001 - callables
    out = []
    for call in calls:
        try:
            call()
            out.append(200)
        except ApiProblem as problem:
            out.append(problem.status)
    return out


def test_150_parallel_upload_creates_leave_at_most_100_pending(stack: Settings) -> None:
    tenant_id, key = _tenant(stack, rate_per_minute=10_000)
    with api_server(stack) as url, ReelqueueClient(url, key) as api:
        def create(_: int) -> tuple[int, str | None, str | None]:
            try:
                start_upload(api, len(PNG), PNG_SHA, "lamp.png", "image/png")
                return 201, None, None
            except ApiProblem as problem:
                return problem.status, problem.slug, problem.headers.get("retry-after")

        with ThreadPoolExecutor(30) as pool:
            answers = list(pool.map(create, range(150)))
    assert _pending(stack, tenant_id) == 100
    assert [a[0] for a in answers].count(201) == 100
    refusals = [a for a in answers if a[0] != 201]
    assert len(refusals) == 50 and all(a[:2] == (429, "upload-quota") and int(a[2] or 0) >= 1 for a in refusals)


def test_the_request_rate_holds_against_parallel_calls(stack: Settings) -> None:
    """The rate is one upsert per call: 60 calls at once with a rate of 20 pass exactly 20."""
    _, key = _tenant(stack, rate_per_minute=20)
    with api_server(stack) as url, ReelqueueClient(url, key) as api, ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(lambda _: _statuses([api.me])[0], range(60)))
    assert (answers.count(200), answers.count(429)) == (20, 40), answers


def test_a_chunked_body_over_the_v1_cap_is_413(stack: Settings) -> None:
    _, key = _tenant(stack)
    body = b'{"prompt": "' + b"x" * (200 * 1024) + b'"}'

    def chunks() -> Iterator[bytes]:  # no Content-Length: sent as chunked transfer encoding
        for start in range(0, len(body), 16 * 1024):
            yield body[start:start + 16 * 1024]

    with api_server(stack) as url:
        sent = httpx.post(f"{url}/v1/generations", content=chunks(), timeout=30,
                          headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json",
                                   "Idempotency-Key": uuid.uuid4().hex})
    assert "content-length" not in sent.request.headers and sent.request.headers["transfer-encoding"] == "chunked"
    assert sent.status_code == 413, sent.text
    assert sent.json()["type"] == "urn:reelqueue:problem:body-too-large"


def test_an_import_past_the_task_cap_is_refused_naming_the_limit(stack: Settings, tmp_path: Path) -> None:
    tenant_id, key = _tenant(stack)
    csv = ("product_id,title,description,image_url,price,currency,category\n" + "".join(
        f"C-{n},Lamp {n},A lamp,https://example.com/{n}.png,19.99,USD,Home\n" for n in range(3))).encode()
    plan = make_plan(tmp_path, locales=("en-US", "de-DE")).read_text()  # 3 products x 2 = 6 tasks
    with api_server(stack, max_import_tasks=5) as url, ReelqueueClient(url, key) as api:
        catalog = upload(api, csv, "shop.csv", "text/csv")
        body = {"asset_id": catalog.id, "plan": plan, "check_urls": False}
        with pytest.raises(ApiProblem) as refused:
            api.request("POST", "/v1/imports", json=body)
        assert (refused.value.status, refused.value.slug) == (422, "import-too-large")
        assert "at most 5" in refused.value.detail and "6 tasks" in refused.value.detail
    with Database(stack.database_url).transaction() as session:  # nothing was written
        assert session.scalar(select(func.count()).select_from(CatalogImport)
                              .where(CatalogImport.tenant_id == tenant_id)) == 0
    with api_server(stack, max_import_tasks=6) as url, ReelqueueClient(url, key) as api:
        assert api.request("POST", "/v1/imports", json=body).json()["tasks"] == 6


@contextmanager
def _stream(url: str, key: str, *, read_s: float = 30.0) -> Iterator[tuple[httpx.Response, Iterator[str]]]:
    """An open `GET /v1/events` stream and its lines after the first, or a refusal (read)."""
    with httpx.Client(base_url=url, timeout=httpx.Timeout(10.0, read=read_s)) as http, http.stream(
            "GET", "/v1/events", headers={"Authorization": f"Bearer {key}", "Accept": "text/event-stream"}) as resp:
        lines = resp.iter_lines()
        if resp.status_code == 200:
            assert next(lines).startswith("retry:")
        else:
            resp.read()
        yield resp, lines


def test_open_event_streams_are_capped_per_tenant(stack: Settings) -> None:
    _, key = _tenant(stack)
    _, other_key = _tenant(stack)
    with api_server(stack, max_streams_per_tenant=2) as url:
        with _stream(url, key) as (first, _), _stream(url, key) as (second, _):
            assert first.status_code == second.status_code == 200
            with _stream(url, key) as (third, _):
                assert third.status_code == 429
                assert third.json()["type"] == "urn:reelqueue:problem:too-many-streams"
                assert int(third.headers["retry-after"]) >= 1
            with _stream(url, other_key) as (elsewhere, _):  # another tenant's streams are its own
                assert elsewhere.status_code == 200
        deadline = time.monotonic() + 30  # the closed streams' places are given back
        while True:
            with _stream(url, key) as (again, _):
                if again.status_code == 200:
                    break
            assert time.monotonic() < deadline, "a closed stream kept its place"
            time.sleep(0.2)


def test_a_revoked_key_ends_its_open_stream_within_5_s(stack: Settings) -> None:
    tenant_id, key = _tenant(stack)
    with Database(stack.database_url).transaction() as session:
        key_id = tenants.list_keys(session, tenant_id)[0].key_id
    with api_server(stack) as url, _stream(url, key, read_s=20.0) as (stream, lines):
        assert stream.status_code == 200
        with Database(stack.database_url).transaction() as session:
            tenants.revoke_key(session, key_id)
        revoked = time.monotonic()
        for _ in lines:  # until the server ends the stream (a keep-alive comes at least every 15 s)
            assert time.monotonic() - revoked < 5.0, "the stream goes on after its key was revoked"
        assert time.monotonic() - revoked < 5.0


def _queued_tasks(stack: Settings, tmp_path: Path, tenant_id: str, count: int) -> list[str]:
    """`count` tasks of `tenant_id`, moved to QUEUED through the state machine, waiting for 2 hours."""
    folder = tmp_path / tenant_id
    folder.mkdir()
    catalog = make_catalog(folder, [(f"F-{n}", f"Lamp {n}", "A lamp") for n in range(count)])
    summary = run_import(stack, catalog, load_plan(make_plan(folder)), catalog=f"cat-{tenant_id}", tenant=tenant_id)
    db = Database(stack.database_url)
    with db.transaction() as session:
        ids = list(session.scalars(select(Task.id).where(Task.import_id == summary.import_id).order_by(Task.id)))
        for task_id in ids:
            for event in (TaskEvent.VALIDATION_STARTED, TaskEvent.VALIDATION_PASSED, TaskEvent.QUEUED):
                task_store.transition(session, task_id, event, source="test", source_event_id=f"{task_id}:{event}")
        session.execute(update(Task).where(Task.id.in_(ids)).values(updated_at=func.now() - timedelta(hours=2)))
    return ids


def _end(stack: Settings, task_ids: list[str]) -> None:
    with Database(stack.database_url).transaction() as session:
        for task_id in task_ids:
            task_store.transition(session, task_id, TaskEvent.CANCEL_REQUESTED, source="test",
                                  source_event_id=f"{task_id}:test-end")
            task_store.transition(session, task_id, TaskEvent.CANCEL_CONFIRMED, source="test",
                                  source_event_id=f"{task_id}:test-end-confirmed")


async def test_a_tenants_own_queue_does_not_refuse_another_tenants_create(stack: Settings, tmp_path: Path,
                                                                          task_queue: str) -> None:
    """Tenant A (max_concurrent = 1) has one task generating and 40 QUEUED for two hours: they wait
    for A's own limit, so B's create is accepted. A task that waits for the platform (its tenant
    below its limit) still makes creates answer 503."""
    busy_tenant, _ = _tenant(stack, max_concurrent=1)
    queued = _queued_tasks(stack, tmp_path, busy_tenant, 41)
    with Database(stack.database_url).transaction() as session:  # one holds A's slot, at the provider
        task_store.transition(session, queued[0], TaskEvent.DISPATCH_CLAIMED, source="test",
                              source_event_id=f"{queued[0]}:claim")
    _, key = _tenant(stack, credits=Decimal(100))
    try:
        with api_server(stack, task_queue, backlog_max_age_s=3000.0) as url, ReelqueueClient(url, key) as api:
            image = (await asyncio.to_thread(upload, api, PNG, "lamp.png", "image/png")).id
            request = GenerationRequest(prompt="A lamp", image_asset_id=image, duration_s=1)
            created = await asyncio.to_thread(api.create_generation, request)
            assert created.status == "CREATED"
            await asyncio.to_thread(api.cancel_generation, created.id)  # its workflow closes its ledger
            await _until_ended(api, created.id)
        waiting_tenant, _ = _tenant(stack, max_concurrent=1)  # below its limit: it waits for the platform
        waiting = _queued_tasks(stack, tmp_path, waiting_tenant, 1)
        try:
            with api_server(stack, backlog_max_age_s=3000.0) as url, ReelqueueClient(url, key) as api:
                with pytest.raises(ApiProblem) as busy:
                    api.create_generation(request)
                assert (busy.value.status, busy.value.slug) == (503, "backlog-too-old")
        finally:
            _end(stack, waiting)
    finally:
        _end(stack, queued)


async def _until_ended(api: ReelqueueClient, generation_id: str) -> None:
    deadline = time.monotonic() + 120
    while (await asyncio.to_thread(api.get_generation, generation_id)).status not in TERMINAL:
        assert time.monotonic() < deadline, f"{generation_id} did not end"
        await asyncio.sleep(0.2)
