"""A task the system cannot settle on its own waits for a person, end to end on the real stack:
the provider loses the job (status answers 404), the task goes to NEEDS_ATTENTION with its
reservation held, `attention` shows it, a decision that does not apply is refused, `--retry`
after the provider recovers finishes it, and the decision is on record."""

from __future__ import annotations

import httpx
import pytest
from cli_helpers import resolve_and_finish, run_cli_async
from stack_helpers import import_small, wait_for_status

from control.starting import start_workflows
from schema import queries
from schema.db import Database

pytestmark = pytest.mark.integration


async def test_needs_attention_then_resolve_retry(stack, client, task_queue, tmp_path):
    db = Database(stack.database_url)
    summary = import_small(stack, tmp_path, [("N-1", "Kettle", "A kettle")], duration_s=1)
    with db.transaction() as session:
        (task,) = queries.list_tasks(session, summary.import_id)
    httpx.post(f"{stack.emulator_url}/_sim/faults", json={"status_missing_s": 600}, timeout=10).raise_for_status()
    try:
        await start_workflows(client, [task], summary.import_id, task_queue)
        await wait_for_status(stack, task.id, {"NEEDS_ATTENTION"}, timeout_s=60)

        listed = await run_cli_async("attention", summary.import_id, "--json")
        assert listed.code == 0, listed.stdout
        (entry,) = listed.json["tasks"]
        assert entry["task_id"] == task.id and entry["stuck"] == "poll" and entry["credit_held"] == 2
        assert (await run_cli_async("ledger", "check", summary.import_id)).code == 0  # held, with a reason

        wrong = await run_cli_async("resolve", task.id, "--accept-duplicate-risk", "--by", "test")
        assert wrong.code == 2 and "unknown submit" in (wrong.stdout + wrong.stderr)
    finally:
        httpx.delete(f"{stack.emulator_url}/_sim/faults", timeout=10)

    outcome = await resolve_and_finish(client, task, "--retry", "--reason", "provider found the job", "--by", "test")
    assert outcome["status"] == "SUCCEEDED"
    with db.transaction() as session:
        detail = queries.task_detail(session, task.id)
    decision = next(e for e in detail["events"] if e["payload"].get("decision") == "retry")
    assert decision["from"] == "NEEDS_ATTENTION" and decision["payload"]["by"] == "test"
    assert (await run_cli_async("attention", summary.import_id, "--json")).json["tasks"] == []
    check = await run_cli_async("ledger", "check", summary.import_id, "--json")
    assert check.code == 0 and check.json["ok"], check.stdout
