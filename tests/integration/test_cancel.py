"""Cancellation: a signal to a running workflow, and a task whose workflow never started."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from cli_helpers import run_cli_async
from stack_helpers import assert_ledger_balanced, import_small, start_one_at_provider

from contracts.messages import CancelRequest
from control.cancel import cancel_unstarted
from control.starting import start_workflows
from schema import queries
from schema.db import Database
from workflows.generation import GenerationWorkflow

pytestmark = [pytest.mark.integration, pytest.mark.long]


async def test_cancel_while_the_provider_runs(stack, client, task_queue, tmp_path, emulator_jobs):
    db = Database(stack.database_url)
    task = await start_one_at_provider(stack, client, task_queue, tmp_path, ("C-1", "Clock", "A clock"))
    handle = client.get_workflow_handle_for(GenerationWorkflow.run, task.workflow_id)
    await handle.signal("cancel", CancelRequest(reason="test"))
    outcome = await asyncio.wait_for(handle.result(), timeout=60)
    assert outcome.status == "CANCELED"
    with db.transaction() as session:
        detail = queries.task_detail(session, task.id)
    moves = [e["to"] for e in detail["events"] if e["applied"]]
    assert moves[-2:] == ["CANCEL_REQUESTED", "CANCELED"]
    job = next(j for j in emulator_jobs() if j["request_key"].startswith(task.id))
    assert job["status"] == "canceled"
    assert_ledger_balanced(stack, [task.id])
    spent = (await run_cli_async("spend", task.import_id, "--json")).json  # whatever it cost is waste
    assert spent["wasted"]["cancelled"] == spent["wasted_total"] == spent["charged"] and spent["held"] == 0


def test_cancel_a_task_that_never_started(stack, tmp_path):
    summary = import_small(stack, tmp_path, [("C-2", "Chair", "A chair")])
    db = Database(stack.database_url)
    with db.transaction() as session:
        (task,) = queries.list_tasks(session, summary.import_id)
    assert cancel_unstarted(db, task.id, "not needed") == "CANCELED"
    assert cancel_unstarted(db, task.id, "again") == "CANCELED"  # same source event: no second move
    with db.transaction() as session:
        detail = queries.task_detail(session, task.id)
    assert [e["to"] for e in detail["events"]] == ["CANCELED"]


async def test_cancel_from_temporal_keeps_postgres_true(stack, client, task_queue, tmp_path, emulator_jobs):
    """The Web UI's Cancel (a workflow cancellation, not our signal) still ends the task CANCELED."""
    from temporalio.client import WorkflowFailureError

    db = Database(stack.database_url)
    task = await start_one_at_provider(stack, client, task_queue, tmp_path, ("C-3", "Lamp", "A lamp"))
    handle = client.get_workflow_handle(task.workflow_id)
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await asyncio.wait_for(handle.result(), timeout=60)
    with db.transaction() as session:
        detail = queries.task_detail(session, task.id)
    assert detail["task"]["status"] == "CANCELED"
    job = next(j for j in emulator_jobs() if j["request_key"].startswith(task.id))
    assert job["status"] == "canceled"
    assert_ledger_balanced(stack, [task.id])


def _set_faults(stack, **faults) -> None:
    httpx.post(f"{stack.emulator_url}/_sim/faults", json=faults, timeout=10).raise_for_status()


async def _cancel_while_dispatching(stack, client, task_queue, tmp_path, emulator_jobs, product, *,
                                    cancel_outage_s: float = 0.0) -> dict:
    """A submit whose answer never comes (the job exists), a Temporal cancel meanwhile."""
    from temporalio.client import WorkflowFailureError

    db = Database(stack.database_url)
    summary = import_small(stack, tmp_path, [product], duration_s=2)
    with db.transaction() as session:
        (task,) = queries.list_tasks(session, summary.import_id)
    _set_faults(stack, submit_hang_after_create=1, job_seconds=600)
    try:
        await start_workflows(client, [task], summary.import_id, task_queue)
        for _ in range(300):
            jobs = [j for j in emulator_jobs() if j["request_key"].startswith(task.id)]
            with db.transaction() as session:
                status = queries.task_detail(session, task.id)["task"]["status"]
            if jobs and status == "DISPATCHING":
                break
            await asyncio.sleep(0.1)
        else:
            pytest.fail(f"the submit never hung at the provider (status {status})")
        if cancel_outage_s:
            _set_faults(stack, cancel_outage_s=cancel_outage_s)
        handle = client.get_workflow_handle(task.workflow_id)
        await handle.cancel(reason="test: cancel while dispatching")
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), timeout=120 + 2 * cancel_outage_s)
    finally:
        httpx.delete(f"{stack.emulator_url}/_sim/faults", timeout=10)
    with db.transaction() as session:
        detail = queries.task_detail(session, task.id)
    assert detail["task"]["status"] == "CANCELED", detail["events"]
    jobs = [j for j in emulator_jobs() if j["request_key"].startswith(task.id)]
    assert [j["status"] for j in jobs] == ["canceled"]
    assert [a["submit_state"] for a in detail["attempts"]] == ["CANCELED"]
    assert_ledger_balanced(stack, [task.id])
    check = await run_cli_async("ledger", "check", summary.import_id, "--json")
    assert check.code == 0 and check.json["ok"], check.stdout
    return detail


async def test_temporal_cancel_during_a_hung_submit_cancels_its_job(stack, client, task_queue, tmp_path,
                                                                    emulator_jobs):
    detail = await _cancel_while_dispatching(stack, client, task_queue, tmp_path, emulator_jobs,
                                             ("C-4", "Vase", "A vase"))
    moves = [e["to"] for e in detail["events"] if e["applied"]]
    assert moves[-4:] == ["SUBMIT_UNKNOWN", "SUBMITTED", "CANCEL_REQUESTED", "CANCELED"]


@pytest.mark.timeout(600)  # two minutes of cancel errors, then the cancel
async def test_temporal_cancel_survives_two_minutes_of_cancel_errors(stack, client, task_queue, tmp_path,
                                                                     emulator_jobs):
    detail = await _cancel_while_dispatching(stack, client, task_queue, tmp_path, emulator_jobs,
                                             ("C-5", "Rug", "A rug"), cancel_outage_s=120)
    cancel_to_end = [e for e in detail["events"] if e["to"] in ("CANCEL_REQUESTED", "CANCELED")]
    assert len(cancel_to_end) == 2


async def test_cli_cancel_cancels_the_workflow_in_temporal(stack, client, task_queue, tmp_path, emulator_jobs):
    from temporalio.client import WorkflowExecutionStatus

    task = await start_one_at_provider(stack, client, task_queue, tmp_path, ("C-6", "Bowl", "A bowl"))
    said = await run_cli_async("cancel", task.id, "--reason", "wrong price", "--json")
    assert said.code == 0 and said.json["outcome"] == "cancel requested", said.stdout
    handle = client.get_workflow_handle(task.workflow_id)
    for _ in range(300):
        if (await handle.describe()).status is not WorkflowExecutionStatus.RUNNING:
            break
        await asyncio.sleep(0.2)
    assert (await handle.describe()).status is WorkflowExecutionStatus.CANCELED
    with Database(stack.database_url).transaction() as session:
        detail = queries.task_detail(session, task.id)
    assert detail["task"]["status"] == "CANCELED"
    requested = next(e for e in detail["events"] if e["to"] == "CANCEL_REQUESTED")
    assert requested["payload"] == {"reason": "cli: wrong price", "by": "temporal"}
    again = await run_cli_async("cancel", task.id, "--json")
    assert again.json["outcome"] == "workflow already closed (CANCELED)"


async def test_tasks_cancelled_while_waiting_for_a_slot_never_reach_the_provider(stack, client, task_queue, tmp_path,
                                                                                  emulator_jobs):
    """Six tasks behind one slot with 30-s jobs; every task still waiting is cancelled: none of them
    has a provider job, and the ledger balances."""
    from control.cancel import cancel_with

    db = Database(stack.database_url)
    products = [(f"W-{i}", f"Waiting item {i}", f"Thing {i}") for i in range(6)]
    summary = import_small(stack, tmp_path, products, duration_s=1,
                           extra="[providers.emulator]\nmax_concurrent = 1\n")
    with db.transaction() as session:
        tasks = queries.list_tasks(session, summary.import_id)
    _set_faults(stack, job_seconds=30.0)
    try:
        await start_workflows(client, tasks, summary.import_id, task_queue)
        for _ in range(600):
            with db.transaction() as session:
                statuses = {t.id: t.status for t in queries.list_tasks(session, summary.import_id)}
            # One task past its submit holds the slot (its 30-s job at the emulator), the five others
            # in line. "Five QUEUED and a job of ours" was not enough: a task granted the slot is still
            # QUEUED until its submit commits, so under load the job could be a "waiting" task's own.
            holders = [t for t, status in statuses.items() if status in ("SUBMITTED", "RUNNING")]
            if (len(holders) == 1 and list(statuses.values()).count("QUEUED") == 5
                    and any(j["request_key"].startswith(holders[0]) for j in emulator_jobs())):
                break
            await asyncio.sleep(0.1)
        else:
            pytest.fail(f"five tasks never waited behind the one slot: {statuses}")
        waiting = [t for t in tasks if statuses[t.id] == "QUEUED"]
        outcomes = await asyncio.gather(*(cancel_with(client, t.workflow_id, "test: cancel the queue", by="test")
                                          for t in waiting))
        assert set(outcomes) == {"cancel requested"}
        await asyncio.wait_for(asyncio.gather(*(client.get_workflow_handle(t.workflow_id).result() for t in tasks),
                                              return_exceptions=True), timeout=180)
    finally:
        httpx.delete(f"{stack.emulator_url}/_sim/faults", timeout=10)
    with db.transaction() as session:
        ended = {t.id: t.status for t in queries.list_tasks(session, summary.import_id)}
    keys = [j["request_key"] for j in emulator_jobs()]
    assert {ended[t.id] for t in waiting} == {"CANCELED"}
    assert [t.id for t in waiting if any(k.startswith(t.id) for k in keys)] == []
    check = await run_cli_async("ledger", "check", summary.import_id, "--json")
    assert check.code == 0 and check.json["ok"], check.stdout
