"""Imports over HTTP and the live event stream on the real stack: an uploaded catalog is imported,
run and exported through /v1/imports; its task's Server-Sent Events, dropped mid-way and resumed
with Last-Event-ID on a restarted gateway, show every state exactly once, in order; a state event
whose id is smaller but whose commit is later is not lost; another tenant sees none of it."""

from __future__ import annotations

import asyncio
import json
import re
from itertools import islice
from pathlib import Path

import pytest
from api_helpers import api_server, new_tenant_client
from sqlalchemy import select, text
from sqlalchemy.orm import Session
from stack_helpers import import_small, make_plan

from adapters.storage import ObjectStorage
from config.settings import Settings
from contracts.task import TaskEvent
from reelqueue_client import ApiProblem, GenerationRequest, ReelqueueClient
from reelqueue_client.transfer import events, upload
from schema import event_feed, task_store
from schema.db import Database
from schema.models import StateEvent, Task
from schema.state_machine import TERMINAL
from schema.uploads import ready_asset

SNAPSHOT_TEXT = re.compile(r"\d+:\d+:")  # how a Postgres snapshot (xmin:xmax:xip) reads
PNG = (Path(__file__).resolve().parents[2] / "examples" / "images" / "aurora-lamp.png").read_bytes()


def _catalog_with_image(stack: Settings, api: ReelqueueClient, tenant_id: str) -> tuple[str, bytes]:
    """An uploaded (READY) image, and a one-product CSV whose image URL is that image's."""
    image = upload(api, PNG, "lamp.png", "image/png")
    with Database(stack.database_url).transaction() as session:
        key = ready_asset(session, tenant_id, image.id).key
    url = ObjectStorage.from_settings(stack).presigned_url(key)
    return image.id, (f"product_id,title,description,image_url,price,currency,category\n"
                      f"E-1,Lamp,A lamp,{url},19.99,USD,Home\n").encode()


def _stored_events(stack: Settings, task_id: str) -> list[tuple[int, str, str]]:
    with Database(stack.database_url).transaction() as session:
        stored = session.scalars(select(StateEvent).where(StateEvent.task_id == task_id,
                                                          StateEvent.applied.is_(True)).order_by(StateEvent.id))
        return [(e.id, e.from_status, e.to_status) for e in stored]


def _read(api: ReelqueueClient, count: int | None, **filters) -> list:  # noqa: ANN003
    """`count` events of one connection (None: until the task ends), then the connection is dropped."""
    stream = events(api, **filters)
    if count is not None:
        return list(islice(stream, count))
    seen = []
    for event in stream:
        seen.append(event)
        if event.to_status in TERMINAL:
            return seen
    return seen


async def test_import_run_and_events_resumed_across_a_gateway_restart(stack, task_queue, tmp_path, monkeypatch):
    monkeypatch.setenv("REELQUEUE_FETCH_ALLOWED_HOSTS", json.dumps([stack.s3_endpoint]))  # the importer's
    with api_server(stack, task_queue) as url:
        tenant_id, api = new_tenant_client(url)
        image_id, csv = _catalog_with_image(stack, api, tenant_id)
        catalog = upload(api, csv, "shop.csv", "text/csv")
        assert catalog.status == "READY", catalog.reason
        body = {"asset_id": catalog.id, "plan": make_plan(tmp_path, duration_s=2).read_text()}
        created = api.request("POST", "/v1/imports", json=body).json()
        assert (created["status"], created["tasks"], created["invalid_rows"]) == ("ACCEPTED", 1, 0)
        assert "report" not in created  # a path on the server's disk
        import_id = created["import_id"]
        again = api.request("POST", "/v1/imports", json=body).json()
        assert again["import_id"] == import_id and again["already_imported"]
        view = api.request("GET", f"/v1/imports/{import_id}").json()
        assert view["by_status"] == {"CREATED": 1} and view["summary"]["tasks_new"] == 1

        run = api.request("POST", f"/v1/imports/{import_id}/run").json()
        assert (run["tasks"], run["started"]) == (1, 1)
        generation = api.create_generation(GenerationRequest(prompt="A lamp on a desk", image_asset_id=image_id))
        first = await asyncio.to_thread(_read, api, 3, import_id=import_id)
    key = api.headers["Authorization"].split()[1]
    with api_server(stack, task_queue) as url:  # a restarted gateway: the position is all in the event id
        api = ReelqueueClient(url, key)
        rest = await asyncio.to_thread(_read, api, None, import_id=import_id, last_event_id=first[-1].id)
        seen = first + rest
        task_id = seen[0].task_id
        stored = _stored_events(stack, task_id)
        assert [(e.event_id, e.from_status, e.to_status) for e in seen] == stored
        assert seen[-1].to_status == "SUCCEEDED" and len(seen) > 3
        polled = api.request("GET", "/v1/events", params={"task_id": task_id}).json()  # no stream: one page
        assert [(e["event_id"], e["from_status"], e["to_status"]) for e in polled["events"]] == stored
        after = api.request("GET", "/v1/events", params={"task_id": task_id},
                            headers={"Last-Event-ID": polled["last_event_id"]}).json()
        assert after["events"] == []
        # a generation made from the uploaded image, followed from its first state
        generated = await asyncio.to_thread(_read, api, None, task_id=generation.id)
        assert [(e.event_id, e.from_status, e.to_status) for e in generated] == _stored_events(stack, generation.id)
        assert generated[-1].to_status == "SUCCEEDED"

        exported = api.request("GET", f"/v1/imports/{import_id}/export").json()
        assert [v["task_id"] for v in exported["videos"]] == [task_id]
        assert api.request("GET", f"/v1/imports/{import_id}").json()["by_status"] == {"SUCCEEDED": 1}
        assert api.request("POST", f"/v1/imports/{import_id}/cancel").json()["unchanged"] == 0  # all ended
        square = {**body, "plan": make_plan(tmp_path, ratios=("1:1",), duration_s=2).read_text()}
        waiting = api.request("POST", "/v1/imports", json=square).json()["import_id"]  # never run: cancel ends it
        cancelled = api.request("POST", f"/v1/imports/{waiting}/cancel").json()
        assert (cancelled["tasks"], cancelled["canceled"]) == (1, 1)
        assert api.request("GET", f"/v1/imports/{waiting}").json()["by_status"] == {"CANCELED": 1}

        _, other = new_tenant_client(url)
        for method, path, params in (
                ("GET", f"/v1/imports/{import_id}", None), ("POST", f"/v1/imports/{import_id}/run", None),
                ("POST", f"/v1/imports/{import_id}/cancel", None), ("GET", f"/v1/imports/{import_id}/export", None),
                ("GET", "/v1/events", {"import_id": import_id}), ("GET", "/v1/events", {"task_id": task_id}),
                ("GET", f"/v1/assets/{catalog.id}", None)):
            with pytest.raises(ApiProblem) as hidden:
                other.request(method, path, params=params)
            assert hidden.value.status == 404, (method, path, params)
        with pytest.raises(ApiProblem) as refused:
            other.request("POST", "/v1/imports", json=body)  # another tenant's catalog cannot be imported
        assert (refused.value.status, refused.value.slug) == (422, "catalog-not-ready")
        # garbled, unreadable by Postgres, or ahead of the present (it would hide what comes until then)
        for garbled in ("12; DROP", "5:3:", f"{2**64}:{2**64}:", "1:9:7,4", f"{2**40}:{2**40}:", "3:4000000000:"):
            with pytest.raises(ApiProblem) as refused:
                api.request("GET", "/v1/events", params={"task_id": task_id}, headers={"Last-Event-ID": garbled})
            assert (refused.value.status, refused.value.slug) == (400, "bad-event-id"), garbled


def test_an_event_that_commits_after_a_larger_id_is_not_lost(stack, tmp_path):
    """Two transitions: the first takes the smaller id and commits last. A cursor of ids alone would
    have skipped it once the larger one was delivered."""
    summary = import_small(stack, tmp_path, [("S-1", "Lamp", "A lamp"), ("S-2", "Clock", "A clock")])
    db = Database(stack.database_url)
    with db.transaction() as session:
        first_task, second_task = (t.id for t in session.query(Task).filter(Task.import_id == summary.import_id))
        cursor = event_feed.now_cursor(session)

    def cancel(session, task_id: str) -> None:  # noqa: ANN001 - Session
        task_store.transition(session, task_id, TaskEvent.CANCEL_REQUESTED, source="test",
                              source_event_id=f"{task_id}:feed-order", payload={})

    late = Session(db.engine)
    late.begin()
    cancel(late, first_task)  # its event id is taken now; the commit comes last
    try:
        with db.transaction() as session:
            cancel(session, second_task)
        with db.transaction() as session:
            delivered, cursor = event_feed.read(session, stack.tenant, cursor, import_id=summary.import_id)
        assert [e.task_id for e in delivered] == [second_task]
        late.commit()
    finally:
        late.close()
    with db.transaction() as session:
        after, _ = event_feed.read(session, stack.tenant, cursor, import_id=summary.import_id)
    assert [e.task_id for e in after] == [first_task]
    assert after[0].event_id < delivered[0].event_id  # the smaller id, delivered after the larger one
    with db.transaction() as session:  # and a resume from the id of the larger one misses nothing either
        resumed, _ = event_feed.read(session, stack.tenant, event_feed.Cursor.parse(delivered[0].id),
                                     import_id=summary.import_id)
    assert [e.event_id for e in resumed] == [after[0].event_id]


def test_event_ids_are_opaque_and_bound_to_their_tenant(stack, tmp_path):
    """Issue 44, also seen: every event id (SSE `id:`, a JSON page's `last_event_id`, the tenant-wide
    start) was a Postgres snapshot, global across tenants: read over time it gauged the whole
    platform's transaction rate. An id is now sealed for its tenant: no snapshot text in it, another
    tenant's refused naming Last-Event-ID, a plain snapshot refused the same way."""
    with api_server(stack) as url:
        tenant_id, api = new_tenant_client(url)
        _, csv = _catalog_with_image(stack, api, tenant_id)
        catalog = upload(api, csv, "shop.csv", "text/csv")
        plan = make_plan(tmp_path, locales=("en-US", "de-DE")).read_text()
        body = {"asset_id": catalog.id, "plan": plan, "check_urls": False}
        import_id = api.request("POST", "/v1/imports", json=body).json()["import_id"]
        with Database(stack.database_url).transaction() as session:  # a state event of each of its tasks
            for task_id in session.scalars(select(Task.id).where(Task.import_id == import_id)):
                task_store.transition(session, task_id, TaskEvent.CANCEL_REQUESTED, source="test",
                                      source_event_id=f"{task_id}:cancel", payload={})
        polled = api.request("GET", "/v1/events", params={"import_id": import_id}).json()
        assert len(polled["events"]) == 2
        streamed = list(islice(events(api, import_id=import_id), 2))
        tenant_wide = api.request("GET", "/v1/events").json()["last_event_id"]
        with Database(stack.database_url).transaction() as session:
            xmin = session.scalar(text("SELECT pg_snapshot_xmin(pg_current_snapshot())::text"))
        ids = [e.id for e in streamed] + [e["id"] for e in polled["events"]] + [polled["last_event_id"], tenant_wide]
        assert streamed and polled["events"]
        for event_id in ids:
            assert not SNAPSHOT_TEXT.search(event_id), event_id
        resumed = api.request("GET", "/v1/events", params={"import_id": import_id},
                              headers={"Last-Event-ID": streamed[0].id}).json()
        assert [e["event_id"] for e in resumed["events"]] == [e["event_id"] for e in polled["events"]][1:]

        _, other = new_tenant_client(url)
        for stolen in (tenant_wide, polled["last_event_id"], f"{xmin}:{xmin}:"):
            with pytest.raises(ApiProblem) as refused:
                other.request("GET", "/v1/events", headers={"Last-Event-ID": stolen})
            assert (refused.value.status, refused.value.slug) == (400, "bad-event-id"), stolen
            assert "Last-Event-ID" in refused.value.detail
