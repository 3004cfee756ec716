"""`reelqueue retry`: a FAILED_FINAL task re-driven ends SUCCEEDED; the redrive is a state event,
attempt numbers continue, and each run's ledger balances on its own."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest
from cli_helpers import run_cli_async
from sqlalchemy import select
from stack_helpers import import_small, run_all

from contracts import workflow_api as api
from schema import queries
from schema.assets import record_asset
from schema.db import Database
from schema.models import CreditEntry, Task

pytestmark = [pytest.mark.integration, pytest.mark.long]


async def test_failed_task_is_redriven_to_success(stack, client, task_queue, tmp_path, monkeypatch):
    summary = import_small(stack, tmp_path, [("D-1", "Drum", "A drum")], duration_s=1)
    httpx.post(f"{stack.emulator_url}/_sim/faults", json={"fail_next": 3}, timeout=10).raise_for_status()
    try:
        (task,) = await run_all(client, stack, summary.import_id, task_queue, timeout=180)
    finally:
        httpx.delete(f"{stack.emulator_url}/_sim/faults", timeout=10)
    assert task.status == "FAILED_FINAL" and task.current_attempt_no == 3

    monkeypatch.setenv("REELQUEUE_TASK_QUEUE", task_queue)  # the CLI starts the new run where our worker is
    planned = await run_cli_async("retry", summary.import_id, "--dry-run", "--json")
    assert planned.code == 0 and [t["id"] for t in planned.json["tasks"]] == [task.id], planned.stdout
    refused = await run_cli_async("retry", summary.import_id, "--status", "SUCCEEDED", "--json")
    assert refused.code == 2 and "can be re-run" in refused.json["error"]

    done = await run_cli_async("retry", summary.import_id, "--by", "test", "--reason", "provider fixed", "--json")
    assert done.code == 0 and (done.json["redriven"], done.json["started"]) == (1, 1), done.stdout
    outcome = await asyncio.wait_for(client.get_workflow_handle(api.workflow_id(task.id, 2)).result(), timeout=120)
    assert outcome["status"] == "SUCCEEDED"

    db = Database(stack.database_url)
    with db.transaction() as session:
        detail = queries.task_detail(session, task.id)
        rows = session.scalars(select(CreditEntry).where(CreditEntry.task_id == task.id)).all()
    assert [a["attempt_no"] for a in detail["attempts"]] == [1, 2, 3, 4]  # numbering continues: new request keys
    assert detail["attempts"][-1]["request_key"].endswith("-a4")
    redrive = next(e for e in detail["events"] if e["event"] == "redrive")
    assert (redrive["from"], redrive["to"], redrive["payload"]["by"]) == ("FAILED_FINAL", "CREATED", "test")
    for run in (1, 2):
        sums = {}
        for r in rows:
            if r.run_no == run:
                sums[r.entry_type] = sums.get(r.entry_type, 0) + r.amount
        assert sums["RESERVE"] == sums.get("SETTLE", 0) + sums.get("RELEASE", 0), (run, sums)
    check = await run_cli_async("ledger", "check", summary.import_id, "--json")
    assert check.code == 0 and check.json["ok"], check.stdout
    # `spend`: what the failed first run was charged is waste "failed"; the second run's video is kept.
    charged = {run: sum(r.amount for r in rows if r.run_no == run and r.entry_type in ("SETTLE", "ADJUSTMENT"))
               for run in (1, 2)}
    spent = (await run_cli_async("spend", summary.import_id, "--json")).json
    assert spent["charged"] == float(charged[1] + charged[2]) and spent["succeeded"] == 1
    assert spent["wasted"] == {"duplicate": 0, "cancelled": 0, "failed": float(charged[1]), "rejected": 0,
                               "regenerated": 0}
    again = await run_cli_async("retry", summary.import_id, "--json")  # SUCCEEDED now: nothing to re-run
    assert again.code == 0 and again.json["tasks"] == []


async def test_a_task_with_a_paid_video_is_re_run_only_when_asked(stack, tmp_path):
    """A task that expired in REVIEW has its video (rendered and paid for): the default re-run
    leaves it alone; --with-video (or nothing for a --task naming it) is the explicit ask."""
    summary = import_small(stack, tmp_path, [("V-1", "Vase", "A vase"), ("V-2", "Vane", "A vane")], duration_s=1)
    db = Database(stack.database_url)
    with db.transaction() as session:
        with_video, without = queries.list_tasks(session, summary.import_id)
        proxy = record_asset(session, business_key=f"test:proxy:{with_video.id}", kind="PROXY", bucket="b",
                             key=f"{with_video.id}/proxy.mp4", size=1, sha256="0" * 64,
                             tenant_id=with_video.tenant_id, task_id=with_video.id)
        for task in (with_video, without):
            session.get(Task, task.id).status = "EXPIRED"
        session.get(Task, with_video.id).output_asset_id = proxy.id

    default = await run_cli_async("retry", summary.import_id, "--dry-run", "--json")
    assert default.code == 0 and [t["id"] for t in default.json["tasks"]] == [without.id], default.stdout
    asked = await run_cli_async("retry", summary.import_id, "--with-video", "--dry-run", "--json")
    assert asked.code == 0 and {t["id"] for t in asked.json["tasks"]} == {with_video.id, without.id}, asked.stdout
    named = await run_cli_async("retry", summary.import_id, "--task", with_video.id, "--dry-run", "--json")
    assert named.code == 2 and "--with-video" in named.json["error"], named.stdout


async def test_an_invalid_task_whose_provider_key_is_set_since_is_revalidated_to_success(stack, client, tmp_path,
                                                                                       monkeypatch):
    """A template routed to a provider without its key ends INVALID; once the key is there,
    `retry --status INVALID` validates it again (a `revalidate` event) and it runs to SUCCEEDED."""
    from stack_helpers import serving

    summary = import_small(stack, tmp_path, [("K-1", "Kettle", "A kettle")], duration_s=5,
                           template_extra='provider = "runway"\nmodel = "gen4_turbo"')
    unkeyed = stack.model_copy(update={"emulate_providers": False, "runway_api_key": ""})
    first_queue, second_queue = f"test-nokey-{uuid.uuid4().hex[:8]}", f"test-key-{uuid.uuid4().hex[:8]}"
    async with serving(client, unkeyed, first_queue):
        (task,) = await run_all(client, unkeyed, summary.import_id, first_queue, timeout=120)
    assert task.status == "INVALID" and "REELQUEUE_RUNWAY_API_KEY" in task.last_error

    monkeypatch.setenv("REELQUEUE_TASK_QUEUE", second_queue)
    async with serving(client, stack, second_queue):  # the key is set now (the emulator's runway dialect)
        done = await run_cli_async("retry", summary.import_id, "--status", "INVALID", "--by", "test",
                                   "--reason", "runway key set", "--json")
        assert done.code == 0 and (done.json["redriven"], done.json["started"]) == (1, 1), done.stdout
        outcome = await asyncio.wait_for(client.get_workflow_handle(api.workflow_id(task.id, 2)).result(),
                                         timeout=180)
    assert outcome["status"] == "SUCCEEDED"
    with Database(stack.database_url).transaction() as session:
        detail = queries.task_detail(session, task.id)
    revalidate = next(e for e in detail["events"] if e["event"] == "revalidate")
    assert (revalidate["from"], revalidate["to"], revalidate["payload"]["by"]) == ("INVALID", "VALIDATING", "test")
    check = await run_cli_async("ledger", "check", summary.import_id, "--skip-storage", "--json")
    assert check.code == 0 and check.json["ok"], check.stdout


async def test_an_invalid_task_whose_cause_cannot_change_is_not_revalidated(stack, client, task_queue, tmp_path):
    """An empty prompt or an unsupported ratio stays what it is: a re-run would end the same way."""
    summary = import_small(stack, tmp_path, [("K-2", "Kite", "A kite")], duration_s=1,
                           template_extra='provider = "runway"\nmodel = "gen4_turbo"')  # runway: no 1 s clips
    (task,) = await run_all(client, stack, summary.import_id, task_queue, timeout=120)
    assert task.status == "INVALID" and "durations" in task.last_error
    planned = await run_cli_async("retry", summary.import_id, "--status", "INVALID", "--dry-run", "--json")
    assert planned.code == 0 and planned.json["tasks"] == []
    refused = await run_cli_async("retry", summary.import_id, "--status", "INVALID", "--task", task.id, "--json")
    assert refused.code == 2 and "import again" in refused.json["error"]
