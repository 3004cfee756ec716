"""The invariant checker (control/invariants.py) on a real import that ran to the end: every rule is
checked and holds; then one thing is broken per rule (an object's bytes, a SENDING attempt, a
forbidden state event, ...) and that rule, and only that rule, counts it. Each test undoes what it
broke (the suite's closing ledger check reads the same database)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime

import pytest
from cli_helpers import run_cli
from sqlalchemy import delete, select, update
from stack_helpers import import_small, run_all, serving

from adapters.storage import ObjectStorage
from bench.chaos import check_run
from config.settings import Settings
from contracts import workflow_api as api
from contracts.admission import SlotRelease, SlotRequest
from control.invariants import check_invariants, emulator_jobs_by_task
from schema.db import Database
from schema.invariants import Invariant
from schema.models import Asset, Attempt, CreditEntry, StateEvent, StrayJob, Task

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
async def run(stack, client, tmp_path_factory) -> Iterator[tuple[Settings, str, list[Task]]]:
    """Two tasks run to SUCCEEDED on a queue whose worker stays up for the module (its gate answers)."""
    queue = f"test-{uuid.uuid4().hex[:12]}"
    summary = import_small(stack, tmp_path_factory.mktemp("invariants"), [("I-1", "Lamp", "A lamp"),
                                                                          ("I-2", "Mug", "A mug")])
    async with serving(client, stack, queue):
        tasks = await run_all(client, stack, summary.import_id, queue)
        assert [t.status for t in tasks] == ["SUCCEEDED"] * 2
        yield stack.model_copy(update={"task_queue": queue}), summary.import_id, tasks


async def _check(run, **kw):
    settings, import_id, _ = run
    jobs = kw.pop("provider_jobs", None) or await asyncio.to_thread(emulator_jobs_by_task, settings)
    kw.setdefault("orphan_safety_s", 0)
    return await check_invariants(settings, import_id=import_id, provider_jobs=jobs, **kw)


@contextlib.contextmanager
def _rows(settings: Settings, *rows) -> Iterator[None]:  # noqa: ANN002 - model instances
    """Rows added for the block, deleted after it."""
    db = Database(settings.database_url)
    with db.transaction() as session:
        session.add_all(rows)
        session.flush()
        keys = [(type(r), r.id) for r in rows]
    try:
        yield
    finally:
        with db.transaction() as session:
            for model, key in keys:
                session.execute(delete(model).where(model.id == key))


async def test_a_finished_import_holds_every_invariant(run):
    report = await _check(run)
    assert report.tasks == 2
    assert report.ok, report.model_dump_json(indent=1)
    assert {r.rule for r in report.rules} == {i.value for i in Invariant}
    assert all(r.checked for r in report.rules), [r for r in report.rules if not r.checked]
    assert "objects hashed" in report.rule("asset_sha256").detail
    assert not report.rule("asset_sha256").detail.startswith("0 ")
    assert "gates asked" in report.rule("gate_slots").detail


async def test_without_the_providers_counts_that_rule_is_not_checked(run):
    settings, import_id, _ = run
    report = await check_invariants(settings, import_id=import_id, orphan_safety_s=0)
    assert report.ok and not report.rule("provider_jobs").checked


async def test_an_object_whose_bytes_changed_breaks_asset_sha256(run):
    settings, _, tasks = run
    storage = ObjectStorage.from_settings(settings)
    with Database(settings.database_url).transaction() as session:
        key = session.scalar(select(Asset.key).where(Asset.task_id == tasks[0].id, Asset.kind == "PROXY"))
    original = storage.read_bytes(key)
    storage.put_bytes(key, original[:-1] + bytes([original[-1] ^ 0xFF]), "video/mp4")
    try:
        report = await _check(run)
    finally:
        storage.put_bytes(key, original, "video/mp4")
    assert report.violated() == {"asset_sha256": 1}
    assert report.rule("asset_sha256").task_ids == [tasks[0].id]


async def test_an_object_no_row_names_breaks_orphan_objects(run):
    settings, _, tasks = run
    storage = ObjectStorage.from_settings(settings)
    key = f"tenants/{tasks[1].tenant_id}/tasks/{tasks[1].id}/raw/9.mp4"
    storage.put_bytes(key, b"nobody wrote a row for me", "video/mp4")
    try:
        report = await _check(run)
        young = await _check(run, orphan_safety_s=3600)
    finally:
        storage.remove(key)
    assert report.violated() == {"orphan_objects": 1} and report.rule("orphan_objects").task_ids == [tasks[1].id]
    assert young.ok  # inside the safety window: maybe a row is being written


async def test_an_attempt_left_sending_breaks_attempt_sending(run):
    settings, _, tasks = run
    t = tasks[0]
    with _rows(settings, Attempt(task_id=t.id, attempt_no=99, provider=t.provider, model=t.model,
                                 request_key=f"{t.id}-a99", submit_state="SENDING", request_fingerprint="x")):
        report = await _check(run)
    assert report.violated() == {"attempt_sending": 1}


async def test_a_forbidden_transition_breaks_state_events(run):
    settings, _, tasks = run
    t = tasks[1]
    with _rows(settings, StateEvent(task_id=t.id, source="test", source_event_id=f"forbidden-{uuid.uuid4().hex}",
                                    event="provider_running", from_status="SUCCEEDED", to_status="RUNNING",
                                    task_version=t.version + 1, applied=True, payload={})):
        report = await _check(run)
    assert report.violated() == {"state_events": 1}
    assert "SUCCEEDED" in report.rule("state_events").detail


async def test_a_settle_off_by_one_breaks_ledger_balanced_for_the_task_and_the_scope(run):
    settings, _, tasks = run
    db = Database(settings.database_url)
    settle = (CreditEntry.task_id == tasks[0].id, CreditEntry.entry_type == "SETTLE")
    with db.transaction() as session:
        session.execute(update(CreditEntry).where(*settle).values(amount=CreditEntry.amount + 1))
    try:
        report = await _check(run)
    finally:
        with db.transaction() as session:
            session.execute(update(CreditEntry).where(*settle).values(amount=CreditEntry.amount - 1))
    assert report.violated() == {"ledger_balanced": 2}  # the task's run, and the import's totals
    assert report.rule("ledger_balanced").task_ids == [tasks[0].id]


async def test_a_job_nobody_recorded_breaks_provider_jobs(run):
    settings, _, tasks = run
    jobs = await asyncio.to_thread(emulator_jobs_by_task, settings)
    report = await _check(run, provider_jobs={**jobs, tasks[1].id: jobs[tasks[1].id] + 1})
    assert report.violated() == {"provider_jobs": 1}


async def test_a_stray_job_not_costed_breaks_stray_unaccounted(run):
    """A recorded stray is one of the provider's jobs (provider_jobs holds); without its ADJUSTMENT
    it is not costed."""
    settings, _, tasks = run
    t = tasks[0]
    jobs = await asyncio.to_thread(emulator_jobs_by_task, settings)
    with _rows(settings, StrayJob(task_id=t.id, attempt_no=1, provider=t.provider, provider_job_id=f"dup-{t.id[:12]}",
                                  found_by="reconcile", accounted=False)):
        report = await _check(run, provider_jobs={**jobs, t.id: jobs[t.id] + 1})
    assert report.violated() == {"stray_unaccounted": 1}


async def test_a_task_in_attention_without_evidence_breaks_task_finished(run):
    settings, _, tasks = run
    db = Database(settings.database_url)
    with db.transaction() as session:
        session.execute(update(Task).where(Task.id == tasks[1].id).values(status="NEEDS_ATTENTION"))
    try:
        report = await _check(run)
        live = await _check(run, require_finished=False)
    finally:
        with db.transaction() as session:
            session.execute(update(Task).where(Task.id == tasks[1].id).values(status="SUCCEEDED"))
    assert report.violated() == {"task_finished": 1}
    assert live.violated() == {"task_finished": 1}  # no evidence is a violation on a live system too


@contextlib.asynccontextmanager
async def _stale_holder(client, gate_id: str, task: Task) -> AsyncIterator[None]:
    """A workflow that runs under a finished task's workflow id asks the gate for a slot: the gate
    grants it (its signal reaches a running workflow), so a SUCCEEDED task holds a slot."""
    gate = client.get_workflow_handle(gate_id)
    impostor = await client.start_workflow("NobodyServesThis", id=task.workflow_id,
                                           task_queue=f"nobody-{uuid.uuid4().hex[:8]}")
    try:
        await gate.signal(api.SIGNAL_GATE_REQUEST, SlotRequest(workflow_id=task.workflow_id, task_id=task.id,
                                                               requested_at=datetime.now(UTC)))
        for _ in range(100):
            if task.workflow_id in await gate.query(api.QUERY_GATE_HOLDERS, result_type=list[str]):
                break
            await asyncio.sleep(0.1)
        yield
    finally:
        await gate.signal(api.SIGNAL_GATE_RELEASE, SlotRelease(workflow_id=task.workflow_id))
        await impostor.terminate("test over")


async def test_a_slot_held_by_a_finished_task_breaks_gate_slots(run, client):
    settings, _, tasks = run
    t = tasks[0]
    async with _stale_holder(client, api.gate_id(t.provider, settings.task_queue), t):
        report = await _check(run)
    assert report.violated() == {"gate_slots": 1} and report.rule("gate_slots").task_ids == [t.id]
    assert (await _check(run)).ok


async def test_the_chaos_runs_check_asks_the_gates_of_its_own_queue(run, client, stack):
    """bench/chaos.py checks with the stack's settings and the run's queue: the slot rule asks that
    queue's gate, names it with its answer, and a stale holder seeded there is a violation."""
    settings, import_id, tasks = run
    t = tasks[0]
    jobs = await asyncio.to_thread(emulator_jobs_by_task, settings)
    gate = api.gate_id(t.provider, settings.task_queue)
    clean = await check_run(stack, settings.task_queue, import_id, jobs)
    async with _stale_holder(client, gate, t):
        stale = await check_run(stack, settings.task_queue, import_id, jobs)
    assert stale.violated() == {"gate_slots": 1} and stale.rule("gate_slots").task_ids == [t.id]
    assert clean.ok and clean.rule("gate_slots").checked, clean.rule("gate_slots")
    assert f"{gate}: 0 slots held" in clean.rule("gate_slots").detail
    assert f"{gate}: 1 slots held" in stale.rule("gate_slots").detail


async def test_a_gate_temporal_does_not_know_though_tasks_took_its_slots_is_not_checked(run):
    """Asked on a queue the tasks never ran on, their provider's gate is NOT_FOUND: the rule looked at
    nothing, so it is not checked (never "no holders"), and its detail names the gate and why."""
    settings, import_id, tasks = run
    elsewhere = settings.model_copy(update={"task_queue": f"nobody-{uuid.uuid4().hex[:8]}"})
    report = await check_invariants(elsewhere, import_id=import_id, orphan_safety_s=0)
    rule = report.rule("gate_slots")
    gate = api.gate_id(tasks[0].provider, elsewhere.task_queue)
    assert not rule.checked and f"{gate}: not found, though 2 tasks of the scope took its slots" in rule.detail, rule


def test_ledger_check_prints_every_rule(run):
    _, import_id, _ = run
    result = run_cli("ledger", "check", import_id, "--json")
    assert result.code == 0, (result.stdout, result.stderr)
    rules = {r["rule"]: r for r in result.json["rules"]}
    assert set(rules) == {i.value for i in Invariant}
    assert not rules["provider_jobs"]["checked"]  # production has no job counts from the provider
    assert result.json["violations"] == [] and result.json["ok"] is True
    human = run_cli("ledger", "check", import_id)
    assert human.code == 0 and "ledger ok" in human.stdout and "not checked" in human.stdout
