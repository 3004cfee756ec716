"""A provider's success webhook that arrives after its task ended CANCELED, on the real stack: the
workflow cancelled, the emulator acknowledged the cancel and ran the job on (its `cancel_lost_race`
fault), then finished it; the gateway records the output as an orphan with its cost booked and the
task flagged, at once, without waiting for the provider backstop's periodic pass."""

from __future__ import annotations

import asyncio
import time
import uuid
from decimal import Decimal

import httpx
import pytest
from backstop_helpers import ended_task, reconcile_until_settled, sim_job
from cli_helpers import run_cli_async
from sqlalchemy import select
from stack_helpers import start_one_at_provider

from adapters.providers.emulator_api import JobOut
from contracts.messages import CancelRequest
from contracts.task import TaskStatus
from emulator.signing import webhook_headers
from schema.db import Database
from schema.models import CreditEntry, ProviderEvent, StateEvent, StrayJob, Task
from workflows.generation import GenerationWorkflow

pytestmark = [pytest.mark.integration, pytest.mark.long]


def _sim(stack, path: str, **body) -> dict:
    answer = httpx.post(f"{stack.emulator_url}/_sim/{path}", json=body, timeout=10)
    answer.raise_for_status()
    return answer.json()


def _job_of(stack, task_id: str) -> dict:
    jobs = httpx.get(f"{stack.emulator_url}/_sim/jobs", timeout=10).json()["jobs"]
    (job,) = [j for j in jobs if j["request_key"].startswith(task_id)]
    return job


def _late_rows(stack, task_id: str, job_id: str) -> tuple[list[StrayJob], list[StateEvent], list[CreditEntry]]:
    with Database(stack.database_url).transaction() as session:
        strays = session.scalars(select(StrayJob).where(StrayJob.provider_job_id == job_id)).all()
        events = session.scalars(select(StateEvent).where(StateEvent.task_id == task_id,
                                                          StateEvent.event == "orphan_output")).all()
        entries = session.scalars(select(CreditEntry).where(CreditEntry.provider_job_id == job_id,
                                                            CreditEntry.entry_type.in_(("ADJUSTMENT", "REFUND"))))
        found = (list(strays), list(events), list(entries.all()))
        session.expunge_all()
    return found


async def _deliver(stack, body: bytes, msg_id: str) -> int:
    """POST one delivery to the gateway, signed as the emulator signs it."""
    headers = webhook_headers(stack.emulator_webhook_secret, msg_id, body, ts=int(time.time()))
    async with httpx.AsyncClient(timeout=30) as http:
        answer = await http.post(stack.webhook_url("emulator"), content=body,
                                 headers={"content-type": "application/json", **headers})
    return answer.status_code


async def _wait_for(what: str, probe, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while not (found := probe()):
        assert time.monotonic() < deadline, f"never: {what}"
        await asyncio.sleep(0.2)
    return found


async def test_a_success_webhook_after_canceled_is_recorded_at_once(stack, client, task_queue, tmp_path):
    _sim(stack, "faults", job_seconds=600, cancel_lost_race=1)
    try:
        task = await start_one_at_provider(stack, client, task_queue, tmp_path, ("L-1", "Kettle", "A kettle"),
                                           duration_s=2)
        handle = client.get_workflow_handle_for(GenerationWorkflow.run, task.workflow_id)
        await handle.signal("cancel", CancelRequest(reason="test: the cancel loses the race"))
        assert (await asyncio.wait_for(handle.result(), timeout=120)).status == "CANCELED"
    finally:
        httpx.delete(f"{stack.emulator_url}/_sim/faults", timeout=10)
    job = _job_of(stack, task.id)
    assert job["status"] == "running" and job["webhook_url"], job  # acknowledged, never stopped

    _sim(stack, f"jobs/{job['id']}", finish_now=True)  # the job ends; its success webhook goes out
    db = Database(stack.database_url)

    def success_stored() -> bool:
        with db.transaction() as session:
            return session.scalar(select(ProviderEvent.id).where(
                ProviderEvent.provider_job_id == job["id"],
                ProviderEvent.payload["status"].astext == "succeeded")) is not None

    await _wait_for("the success webhook stored", success_stored)
    strays, events, entries = await _wait_for(
        "the late output recorded", lambda: all(found := _late_rows(stack, task.id, job["id"])) and found)
    job = _job_of(stack, task.id)
    cost = Decimal(str(job["usage"]["cost"]))
    assert job["status"] == "succeeded" and cost > 0
    (stray,), (event,), (entry,) = strays, events, entries
    assert (stray.task_id, stray.attempt_no, stray.found_by, stray.accounted) == (task.id, 1, "webhook", True)
    assert stray.cost == cost and stray.provider_status == "succeeded"
    assert event.applied is False and event.source == "webhook" and event.payload["outputs"]
    assert (entry.entry_type, entry.amount, entry.task_id, entry.attempt_no) == ("ADJUSTMENT", cost, task.id, 1)
    assert "CANCELED" in entry.note and job["id"] in entry.note
    with db.transaction() as session:
        assert session.get(Task, task.id).status == "CANCELED"  # terminal states are sticky

    # The same success delivered again (another delivery id), then a backstop pass: nothing more.
    body = JobOut.model_validate(job).model_dump_json().encode()
    assert await _deliver(stack, body, f"redelivery-{job['id']}") == 200
    done = await run_cli_async("ledger", "reconcile", "--provider", "emulator", "--since", "1", "--json")
    assert done.code == 0, done.stdout + done.stderr
    found = next(f for f in done.json["findings"] if f["job_id"] == job["id"])
    assert (found["verdict"], found["booked"]) == ("output_after_cancel", None)
    assert [len(rows) for rows in _late_rows(stack, task.id, job["id"])] == [1, 1, 1]

    check = await run_cli_async("ledger", "check", task.import_id, "--skip-storage", "--json")
    assert check.code == 0 and check.json["ok"], check.stdout
    assert [o["job_id"] for o in check.json["orphans"]] == [job["id"]]


async def test_a_late_success_without_a_cost_is_booked_at_the_estimate_until_a_listing_says(stack, tmp_path):
    """A success webhook that carries no cost, for a task that ended CANCELED: the task's estimate is
    booked at once (the job may bill and nothing else may ever say so); the backstop's listing then
    books the difference to what the provider charged, once."""
    key = f"late-{uuid.uuid4().hex}-a1"
    job = sim_job(stack, key)
    task = ended_task(stack, tmp_path, TaskStatus.CANCELED, job["id"], key, "CANCELED")
    costless = JobOut.model_validate(job).model_copy(update={"usage": None}).model_dump_json().encode()

    assert await _deliver(stack, costless, f"costless-{job['id']}") == 200

    (stray,), (event,), (entry,) = _late_rows(stack, task.id, job["id"])  # written before the 200
    assert (stray.found_by, stray.cost, entry.entry_type, entry.amount) == ("webhook", None, "ADJUSTMENT",
                                                                           task.estimated_cost)
    assert "estimate" in entry.note and event.payload["cost"] is None
    assert await _deliver(stack, costless, f"costless-again-{job['id']}") == 200
    assert [len(rows) for rows in _late_rows(stack, task.id, job["id"])] == [1, 1, 1]

    await reconcile_until_settled()
    await reconcile_until_settled()
    strays, _, entries = _late_rows(stack, task.id, job["id"])
    cost = Decimal(str(job["usage"]["cost"]))
    assert len(entries) == 2 and strays[0].cost == cost
    signed = {"ADJUSTMENT": 1, "REFUND": -1}
    assert sum(signed[e.entry_type] * e.amount for e in entries) == cost


async def test_a_late_success_webhook_of_a_task_that_succeeded_books_nothing(stack, tmp_path):
    """A late copy of a success the workflow saw itself (its signal finds the workflow closed): only
    an output after CANCELED is the webhook path's business; costs are compared by the listing."""
    key = f"late-{uuid.uuid4().hex}-a1"
    job = sim_job(stack, key)
    task = ended_task(stack, tmp_path, TaskStatus.SUCCEEDED, job["id"], key, "SUCCEEDED")
    body = JobOut.model_validate(job).model_dump_json().encode()

    assert await _deliver(stack, body, f"late-copy-{job['id']}") == 200

    assert _late_rows(stack, task.id, job["id"]) == ([], [], [])
