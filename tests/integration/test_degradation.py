"""The degradation rules of docs/reliability.md ("Degradation") on the real stack: Postgres stopped,
the ledger table locked, object storage stopped, each while a task's job runs at the provider.

Each test stops or locks a service of the session's stack and brings it back in a `finally`; the test
files of one pytest process run one after another, so no other test sees the outage.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from sqlalchemy import func, select
from stack_helpers import assert_ledger_balanced, import_small, make_catalog, make_plan, start_one_at_provider
from test_api_generations import _image, _tenant, gateway

import devstack
from adapters.storage import ObjectStorage
from cli.output import EXIT_UNAVAILABLE
from config.settings import Settings
from contracts.messages import GenerationOutcome
from control.starting import start_workflows
from devstack.probes import psycopg_conninfo
from reelqueue_client import GenerationRequest
from schema import queries
from schema.db import Database
from schema.models import Asset, CatalogImport, CreditEntry, IdempotencyRecord, Task, Upload

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.timeout(300), pytest.mark.long]


def cli(*args: str) -> subprocess.CompletedProcess:
    """`reelqueue ...` as its own process (the exit code and stderr a user sees), on the session's stack."""
    return subprocess.run([sys.executable, str(ROOT / "starter.py"), *args], capture_output=True, text=True,
                          env=dict(os.environ), cwd=ROOT, timeout=120)


def count(db: Database, model, **where) -> int:  # noqa: ANN001
    with db.transaction() as session:
        return session.scalar(select(func.count()).select_from(model).filter_by(**where))


def jobs_of(emulator_jobs, task_id: str) -> list[dict]:
    return [j for j in emulator_jobs() if str(j.get("request_key", "")).startswith(task_id)]


async def pending(client, workflow_id: str) -> tuple[str, int, str] | None:
    """The workflow's retrying step: its name, its try and the last try's failure; an activity pending at
    the server, or a local step (local-db-steps-v1) whose failed try its last marker records."""
    handle = client.get_workflow_handle(workflow_id)
    described = await handle.describe()
    for activity in described.raw_description.pending_activities:
        return activity.activity_type.name, activity.attempt, activity.last_failure.message
    for event in reversed((await handle.fetch_history()).events):
        marker = event.marker_recorded_event_attributes
        if event.HasField("marker_recorded_event_attributes") and marker.marker_name == "core_local_activity":
            data = json.loads(marker.details["data"].payloads[0].data)
            failure = marker.failure.cause if marker.failure.HasField("cause") else marker.failure
            return (data["activity_type"], data["attempt"], failure.message) if marker.HasField("failure") else None
    return None


async def status_of(db: Database, task_id: str) -> str:
    with db.transaction() as session:
        return session.get(Task, task_id).status


async def held_in(db: Database, task_id: str, allowed: set[str], seconds: float) -> set[str]:
    """Every status the task shows over `seconds`; the test fails at once on one outside `allowed`."""
    seen: set[str] = set()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        status = await status_of(db, task_id)
        seen.add(status)
        assert status in allowed, f"task {task_id} went to {status} during the outage"
        await asyncio.sleep(0.5)
    return seen


async def result(client, task: Task, timeout_s: float = 240):  # noqa: ANN202
    handle = client.get_workflow_handle(task.workflow_id, result_type=GenerationOutcome)
    return await asyncio.wait_for(handle.result(), timeout=timeout_s)


def report(what: str, task: Task, since: float) -> None:
    """How long the task took to end once the dependency was back (the figures in docs/reliability.md)."""
    print(f"{what}: task {task.id[:8]} ended {time.monotonic() - since:.1f} s later")


@contextlib.contextmanager
def stopped(stack: Settings, name: str, sig: int) -> Iterator[None]:
    """The stack's `name` down for the block (killed with `sig`), started again afterwards."""
    assert devstack.kill_service(stack, name, sig, wait_s=30) is not None, f"{name} was not running"
    try:
        yield
    finally:
        devstack.up(stack, services=[name])


async def test_postgres_down_refuses_new_work_and_the_running_task_resumes(
        stack: Settings, client, task_queue: str, tmp_path: Path, emulator_jobs) -> None:
    db = Database(stack.database_url)
    running = await start_one_at_provider(stack, client, task_queue, tmp_path / "running", ("pgd-run", "Lamp", "desk"))
    waiting = import_small(stack, tmp_path / "waiting", [("pgd-wait", "Lamp", "shelf")])  # imported, not run
    refused = tmp_path / "refused"
    catalog = make_catalog(refused, [(f"pgd-new-{uuid.uuid4().hex[:6]}", "Lamp", "new")])
    plan = make_plan(refused)
    tenant, key = _tenant(db)
    image = _image(stack, db, tenant)
    storage = ObjectStorage.from_settings(stack)
    catalogs_before = {o.key for o in storage.list_objects(f"tenants/{stack.tenant}/catalogs/")}

    with gateway(stack, task_queue) as base, stopped(stack, "postgres", signal.SIGINT):
        down_at = time.monotonic()
        imported = await asyncio.to_thread(cli, "import", str(catalog), "--plan", str(plan), "--catalog",
                                           f"cat-refused-{uuid.uuid4().hex[:6]}")
        started = await asyncio.to_thread(cli, "run", waiting.import_id)
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as api:
            created = await api.post("/v1/generations", headers={"Idempotency-Key": "pgd-1"},
                                     json=GenerationRequest(prompt="p", image_asset_id=image,
                                                            duration_s=1).model_dump(mode="json"))
            upload = await api.post("/v1/uploads", json={"filename": "c.csv", "size": 10, "content_type": "text/csv",
                                                         "sha256": "0" * 64})
            api_import = await api.post("/v1/imports", json={"asset_id": "ast_" + "0" * 32, "plan": plan.read_text()})
        await asyncio.sleep(max(0.0, 20 - (time.monotonic() - down_at)))  # the job ends at the provider meanwhile

    for done in (imported, started):
        assert done.returncode == EXIT_UNAVAILABLE, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "Postgres at 127.0.0.1:" in lines[0] and "nothing was written" in lines[0], lines
    for answer in (created, upload, api_import):
        assert answer.status_code == 503, (answer.request.url, answer.text)
        assert answer.headers["content-type"] == "application/problem+json" and int(answer.headers["retry-after"]) > 0
        assert answer.json()["type"].endswith("database-unavailable")

    back_at = time.monotonic()
    outcome = await result(client, running)
    report("Postgres back", running, back_at)
    assert outcome.status.value == "SUCCEEDED", outcome
    assert len(jobs_of(emulator_jobs, running.id)) == 1 and outcome.attempts == 1, "the outage cost no attempt"
    assert_ledger_balanced(stack, [running.id])
    # Nothing half-written by the refusals.
    assert count(db, CatalogImport, catalog=imported.args[-1]) == 0
    assert count(db, Task, tenant_id=tenant) == 0 and count(db, IdempotencyRecord, tenant_id=tenant) == 0
    assert count(db, Upload, tenant_id=tenant) == 0
    assert {o.key for o in storage.list_objects(f"tenants/{stack.tenant}/catalogs/")} == catalogs_before
    with db.transaction() as session:
        (task,) = queries.list_tasks(session, waiting.import_id)
    assert task.status == "CREATED"
    with pytest.raises(Exception, match="not found"):
        await client.get_workflow_handle(task.workflow_id).describe()


@contextlib.contextmanager
def ledger_locked(stack: Settings) -> Iterator[None]:
    """`credit_ledger` locked ACCESS EXCLUSIVE (as a migration would) by a connection of the test."""
    with psycopg.connect(psycopg_conninfo(stack.database_url)) as conn:
        conn.execute("LOCK TABLE credit_ledger IN ACCESS EXCLUSIVE MODE")
        yield
        conn.rollback()


async def test_a_locked_ledger_submits_nothing_new_and_the_running_task_settles_afterwards(
        stack: Settings, client, task_queue: str, tmp_path: Path, emulator_jobs) -> None:
    db = Database(stack.database_url)
    running = await start_one_at_provider(stack, client, task_queue, tmp_path / "running", ("lock-run", "Lamp", "a"))
    fresh = import_small(stack, tmp_path / "fresh", [("lock-new", "Lamp", "b")])
    with db.transaction() as session:
        (new,) = queries.list_tasks(session, fresh.import_id)
    tenant, key = _tenant(db)
    image = _image(stack, db, tenant)

    with gateway(stack, task_queue) as base, ledger_locked(stack):
        await start_workflows(client, [new], fresh.import_id, task_queue)
        async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30) as api:
            created = await api.post("/v1/generations", headers={"Idempotency-Key": "lock-1"},
                                     json=GenerationRequest(prompt="p", image_asset_id=image,
                                                            duration_s=1).model_dump(mode="json"))
        seen = await held_in(db, new.id, {"CREATED", "VALIDATING"}, 25)
        step = await pending(client, new.workflow_id)
        ran = await status_of(db, running.id)
        with db.transaction() as session:
            proxies = session.scalars(select(Asset.kind).where(Asset.task_id == running.id)).all()
        assert jobs_of(emulator_jobs, new.id) == [], "no paid submit without its reservation"

    assert seen == {"CREATED"}  # lean-path-v1: the prepare step's moves are in the transaction the lock fails
    assert step is not None and step[0] == "prepare_task" and step[1] >= 2, step
    assert "lock not available" in step[2], step  # lock_timeout: the try failed and is retried, not hung
    assert ran == "POST_PROCESSING" and "PROXY" in proxies, (ran, proxies)  # finished but for its settlement
    assert created.status_code == 503 and created.json()["type"].endswith("database-unavailable"), created.text
    assert count(db, Task, tenant_id=tenant) == 0

    back_at = time.monotonic()
    for task in (running, new):
        outcome = await result(client, task)
        report("ledger unlocked", task, back_at)
        assert outcome.status.value == "SUCCEEDED", outcome
        assert len(jobs_of(emulator_jobs, task.id)) == 1
    assert_ledger_balanced(stack, [running.id, new.id])
    assert count(db, CreditEntry, task_id=running.id, entry_type="SETTLE") == 1


async def test_object_storage_down_holds_the_task_in_output_fetching_until_it_returns(
        stack: Settings, client, task_queue: str, tmp_path: Path, emulator_jobs) -> None:
    db = Database(stack.database_url)
    task = await start_one_at_provider(stack, client, task_queue, tmp_path / "s3", ("s3d-run", "Lamp", "c"))
    # The provider reads the task's input image from object storage: stop it only once that is done.
    deadline = time.monotonic() + 60
    while not any(j.get("render_state") == "done" for j in jobs_of(emulator_jobs, task.id)):
        assert time.monotonic() < deadline, jobs_of(emulator_jobs, task.id)
        await asyncio.sleep(0.1)
    with stopped(stack, "s3", signal.SIGKILL):
        deadline = time.monotonic() + 60
        while await status_of(db, task.id) != "OUTPUT_FETCHING":
            assert time.monotonic() < deadline, await status_of(db, task.id)
            await asyncio.sleep(0.3)
        await held_in(db, task.id, {"OUTPUT_FETCHING"}, 25)
        step = await pending(client, task.workflow_id)
    assert step is not None and step[0] == "fetch_output" and "object storage is unreachable" in step[2], step

    back_at = time.monotonic()
    outcome = await result(client, task)
    report("object storage back", task, back_at)
    assert outcome.status.value == "SUCCEEDED", outcome
    assert len(jobs_of(emulator_jobs, task.id)) == 1
    storage = ObjectStorage.from_settings(stack)
    with db.transaction() as session:
        raw = session.scalars(select(Asset).where(Asset.task_id == task.id, Asset.kind == "RAW_OUTPUT")).one()
    stored = storage.stat(raw.key)
    assert stored is not None and stored.sha256 == raw.sha256
    assert_ledger_balanced(stack, [task.id])
