"""A duplicate job the provider refuses to answer for, end to end on the real stack: the workflow
does not fail; the task waits in NEEDS_ATTENTION (stuck at stray, its reservation held, `ledger
check` clean), and once a person books the duplicate's unknown cost it ends SUCCEEDED with its
video, one ADJUSTMENT for the duplicate and `ledger check` still clean."""

from __future__ import annotations

import httpx
import pytest
from cli_helpers import resolve_and_finish, run_cli_async
from sqlalchemy import select
from stack_helpers import import_small, wait_for_status

from activities.submit import request_key
from adapters.providers.base import GenerationRequest
from adapters.providers.emulator import EmulatorProvider
from control.starting import start_workflows
from schema import queries
from schema.db import Database
from schema.models import CreditEntry

pytestmark = [pytest.mark.integration, pytest.mark.long]


async def test_a_refused_duplicate_waits_for_a_person_and_the_video_is_kept(stack, client, task_queue, tmp_path):
    db = Database(stack.database_url)
    summary = import_small(stack, tmp_path, [("D-1", "Lamp", "A lamp")], duration_s=1)
    with db.transaction() as session:
        (task,) = queries.list_tasks(session, summary.import_id)
    emulator = EmulatorProvider(stack.emulator_url, stack.emulator_api_key)
    # A job already holds the task's first request key: the workflow's own submit (its answer lost)
    # makes a second one, which reconcile finds as the duplicate; its cancel then answers 404.
    first = emulator.submit(GenerationRequest(request_key=request_key(task.id, 1), model=task.model, prompt="p",
                                              aspect_ratio="9:16", duration_s=1.0)).job_id
    faults = {"submit_hang_after_create": 1, "cancel_missing_s": 600}
    httpx.post(f"{stack.emulator_url}/_sim/faults", json=faults, timeout=10).raise_for_status()
    try:
        await start_workflows(client, [task], summary.import_id, task_queue)
        await wait_for_status(stack, task.id, {"NEEDS_ATTENTION"}, timeout_s=120)
        listed = await run_cli_async("attention", summary.import_id, "--json")
        (entry,) = listed.json["tasks"]
        assert entry["stuck"] == "stray" and len(entry["strays"]) == 1 and entry["strays"][0] != first
        assert "ProviderRefused" in entry["evidence"] and entry["credit_held"] > 0
        assert (await run_cli_async("ledger", "check", summary.import_id)).code == 0  # held, with a reason
    finally:
        httpx.delete(f"{stack.emulator_url}/_sim/faults", timeout=10)

    outcome = await resolve_and_finish(client, task, "--accept-duplicate-risk", "--reason", "billed once, checked",
                                       "--by", "test")
    assert outcome["status"] == "SUCCEEDED"
    with db.transaction() as session:
        (adjustment,) = session.scalars(select(CreditEntry).where(CreditEntry.task_id == task.id,
                                                                  CreditEntry.entry_type == "ADJUSTMENT")).all()
    assert adjustment.provider_job_id == entry["strays"][0] and adjustment.amount == task.estimated_cost
    assert "accepted by test: billed once, checked" in adjustment.note
    check = await run_cli_async("ledger", "check", summary.import_id, "--json")
    assert check.code == 0 and check.json["ok"], check.stdout
    spent = (await run_cli_async("spend", summary.import_id, "--json")).json  # the duplicate is waste
    assert spent["wasted"]["duplicate"] == spent["wasted_total"] == float(adjustment.amount)
    assert spent["adjustments"] == float(adjustment.amount) and spent["succeeded"] == 1
    emulator.cancel(entry["strays"][0])
