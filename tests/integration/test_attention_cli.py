"""`reelqueue attention` and `reelqueue resolve`: the queue is empty on a healthy import, shows the
evidence of a waiting task, and a decision is refused (exit 2) unless a workflow waits for one."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import pytest
from cli_helpers import run_cli, run_cli_async
from sqlalchemy import update
from stack_helpers import import_small, run_all, start_one_at_provider

from contracts import workflow_api as api
from contracts.messages import CancelRequest
from schema import queries
from schema.db import Database
from schema.models import Attempt, CreditEntry, StateEvent, Task

pytestmark = pytest.mark.integration


async def test_attention_lists_nothing_on_a_healthy_import(stack, client, task_queue, tmp_path):
    summary = import_small(stack, tmp_path, [("A-1", "Lamp", "A lamp"), ("A-2", "Mug", "A mug")])
    tasks = await run_all(client, stack, summary.import_id, task_queue)
    assert {t.status for t in tasks} == {"SUCCEEDED"}
    scoped = await run_cli_async("attention", summary.import_id, "--json")
    assert scoped.code == 0 and scoped.json == {"total": 0, "tasks": []}
    human = await run_cli_async("attention", summary.import_id)
    assert human.code == 0 and "no task needs attention" in human.stdout
    everywhere = await run_cli_async("attention", "--json")
    assert not {t["task_id"] for t in everywhere.json["tasks"]} & {t.id for t in tasks}


def test_attention_shows_the_latest_evidence_attempts_and_held_credit(stack, tmp_path):
    """Seeded rows (the end-to-end path into NEEDS_ATTENTION has its own test): what the listing reads."""
    summary = import_small(stack, tmp_path, [("A-3", "Vase", "A vase")])
    db = Database(stack.database_url)
    with db.transaction() as session:
        (task,) = queries.list_tasks(session, summary.import_id)
        session.execute(update(Task).where(Task.id == task.id).values(
            status="NEEDS_ATTENTION", last_error="provider cannot be asked", version=2))
        session.add(Attempt(task_id=task.id, attempt_no=1, provider="emulator", model="m", request_key=f"{task.id}-a1",
                            submit_state="UNKNOWN", request_fingerprint="f", error_message="submit timed out"))
        for seq, evidence in ((1, "older evidence"), (2, "provider cannot be asked")):
            session.add(StateEvent(task_id=task.id, source="workflow", source_event_id=f"{task.id}:{seq}:na",
                                   event="needs_attention", from_status="SUBMIT_UNKNOWN", to_status="NEEDS_ATTENTION",
                                   task_version=seq, payload={"stuck": "reconcile", "evidence": evidence,
                                                              "job_id": None, "unknown_attempt": 1}))
        session.add(CreditEntry(tenant_id=task.tenant_id, task_id=task.id, entry_type="RESERVE", amount=Decimal(3),
                                business_key=f"reserve:{task.id}"))

    listing = run_cli("attention", summary.import_id, "--json")
    assert listing.code == 0 and listing.json["total"] == 1
    (item,) = listing.json["tasks"]
    assert item["task_id"] == task.id and item["workflow_id"] == task.workflow_id
    assert (item["stuck"], item["evidence"], item["job_id"], item["unknown_attempt"]) == (
        "reconcile", "provider cannot be asked", None, 1)
    assert item["last_error"] == "provider cannot be asked" and item["credit_held"] == 3.0
    assert item["attempts"] == [{"attempt_no": 1, "submit_state": "UNKNOWN", "provider_job_id": None,
                                 "provider_status": None, "error": "submit timed out"}]
    human = run_cli("attention", summary.import_id)
    assert task.id in human.stdout and "--accept-duplicate-risk" in human.stdout and "UNKNOWN" in human.stdout

    # Postgres says NEEDS_ATTENTION, but no workflow waits: Temporal has nobody to take the decision.
    orphan = run_cli("resolve", task.id, "--accept-duplicate-risk", "--json")
    assert orphan.code == 2 and "never ran" in orphan.json["error"], orphan.stdout


def test_resolve_needs_exactly_one_action_and_a_known_task(stack):
    for args, message in ((("t",), "exactly one"), (("t", "--retry", "--fail", "--reason", "x"), "exactly one"),
                          (("t", "--fail"), "needs --reason"), (("no-such-task", "--retry"), "no task")):
        result = run_cli("resolve", *args, "--json")
        assert result.code == 2 and message in result.json["error"], (args, result.stdout, result.exception)


async def test_resolve_is_refused_unless_the_workflow_waits_for_a_decision(stack, client, task_queue, tmp_path):
    task = await start_one_at_provider(stack, client, task_queue, tmp_path, ("A-4", "Clock", "A clock"))
    db = Database(stack.database_url)

    refused = await run_cli_async("resolve", task.id, "--retry", "--by", "tester", "--json")
    assert refused.code == 2, (refused.stdout, refused.exception)
    assert "not waiting for a decision" in refused.json["error"] and refused.json["task_id"] == task.id
    human = await run_cli_async("resolve", task.id, "--fail", "--reason", "test")
    assert human.code == 2 and "not waiting for a decision" in human.stderr

    handle = client.get_workflow_handle(task.workflow_id)
    await handle.signal(api.SIGNAL_CANCEL, CancelRequest(reason="test over"))
    await asyncio.wait_for(handle.result(), timeout=60)
    closed = await run_cli_async("resolve", task.id, "--retry", "--json")
    assert closed.code == 2 and "not running" in closed.json["error"], closed.stdout
    with db.transaction() as session:
        assert session.get(Task, task.id).status == "CANCELED"  # refusals changed nothing
