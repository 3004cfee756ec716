"""The pipeline end to end on the real embedded stack: catalog -> workflows -> stored, transcoded videos."""

from __future__ import annotations

import asyncio
import hashlib

import httpx
import pytest
from stack_helpers import assert_ledger_balanced, import_small, run_all
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from adapters.media.transcode import probe
from adapters.storage import ObjectStorage
from control.starting import start_workflows
from schema import queries
from schema.db import Database
from workflows.generation import GenerationWorkflow

pytestmark = pytest.mark.integration

FRAME = {"9:16": (360, 640), "16:9": (640, 360)}


async def test_one_task_end_to_end(stack, client, task_queue, tmp_path, emulator_jobs):
    summary = import_small(stack, tmp_path, [("P-1", "Desk Lamp", "A lamp")], ratios=("9:16", "16:9"))
    assert (summary.products, summary.tasks, summary.tasks_new) == (1, 2, 2)
    tasks = await run_all(client, stack, summary.import_id, task_queue)
    assert [t.status for t in tasks] == ["SUCCEEDED", "SUCCEEDED"]

    storage = ObjectStorage.from_settings(stack)
    db = Database(stack.database_url)
    for task in tasks:
        with db.transaction() as session:
            detail = queries.task_detail(session, task.id)
        kinds = {a["kind"]: a for a in detail["assets"]}
        assert set(kinds) == {"RAW_OUTPUT", "PROXY", "HLS", "THUMBNAIL"}
        for asset in detail["assets"]:
            data = storage.read_bytes(asset["key"])
            assert hashlib.sha256(data).hexdigest() == asset["sha256"] and len(data) == asset["size"]
        local = tmp_path / f"{task.id}.mp4"
        storage.get_to_file(kinds["PROXY"]["key"], local)
        info = probe(local)
        assert info.video_codec == "h264" and info.audio_codec == "aac"
        assert (info.width, info.height) == FRAME[task.aspect_ratio]
        assert abs(info.duration_s - 2.0) <= 0.2
        playlist = storage.read_bytes(kinds["HLS"]["key"]).decode()
        assert "#EXT-X-PLAYLIST-TYPE:VOD" in playlist and ".ts" in playlist
        assert kinds["HLS"]["meta"]["segments"]
        assert storage.read_bytes(kinds["THUMBNAIL"]["key"])[:3] == b"\xff\xd8\xff"
        assert [a["submit_state"] for a in detail["attempts"]] == ["SUCCEEDED"]
        assert detail["events"][-1]["to"] == "SUCCEEDED"
        assert [e["version"] for e in detail["events"]] == list(range(1, len(detail["events"]) + 1))
    keys = [j["request_key"] for j in emulator_jobs()]
    for task in tasks:
        assert sum(k.startswith(task.id) for k in keys) == 1
    assert_ledger_balanced(stack, [t.id for t in tasks])
    assert await _ui_workflow_ids(stack, f'TaskStatus="SUCCEEDED" AND ImportId="{summary.import_id}"', 2) == {
        t.workflow_id for t in tasks
    }
    assert await _ui_workflow_ids(stack, f'TaskStatus="RUNNING" AND ImportId="{summary.import_id}"', 0) == set()
    for task in tasks:  # the code that ran must replay its own history deterministically
        history = await client.get_workflow_handle(task.workflow_id).fetch_history()
        await Replayer(workflows=[GenerationWorkflow], data_converter=pydantic_data_converter).replay_workflow(history)


async def _ui_workflow_ids(settings, query: str, expected: int) -> set[str]:
    """What the Temporal Web UI lists for a filter (its HTTP API); visibility lags a little."""
    url = f"{settings.temporal_ui_url}/api/v1/namespaces/{settings.temporal_namespace}/workflows"
    ids: set[str] = set()
    async with httpx.AsyncClient(timeout=10) as http:
        for _ in range(50):
            body = (await http.get(url, params={"query": query})).json()
            ids = {e["execution"]["workflowId"] for e in body.get("executions") or []}
            if len(ids) == expected:
                break
            await asyncio.sleep(0.2)
    return ids


async def test_reimport_and_rerun_create_nothing(stack, client, task_queue, tmp_path, emulator_jobs):
    first = import_small(stack, tmp_path, [("R-1", "Mug", "A mug"), ("R-2", "Cup", "A cup")])
    await run_all(client, stack, first.import_id, task_queue)
    jobs_before = [(j["id"], j["request_key"]) for j in emulator_jobs()]  # (output URLs are signed per read)

    again = import_small(stack, tmp_path, [("R-1", "Mug", "A mug"), ("R-2", "Cup", "A cup")])
    assert again.import_id == first.import_id and again.already_imported
    assert again.tasks_new == 0
    db = Database(stack.database_url)
    with db.transaction() as session:
        tasks = queries.list_tasks(session, first.import_id)
        assert len(tasks) == first.tasks == 2
    started = await start_workflows(client, tasks, first.import_id, task_queue)
    assert started["started"] == 0
    assert [(j["id"], j["request_key"]) for j in emulator_jobs()] == jobs_before


async def test_unknown_submit_is_reconciled_not_resubmitted(stack, client, task_queue, tmp_path, emulator_jobs):
    """The provider creates the job but the answer never arrives: reconcile finds it, no second job."""
    import httpx

    summary = import_small(stack, tmp_path, [("U-1", "Kettle", "A kettle")])
    httpx.post(f"{stack.emulator_url}/_sim/faults", json={"submit_hang_after_create": 1}, timeout=10)
    try:
        tasks = await run_all(client, stack, summary.import_id, task_queue)
    finally:
        httpx.delete(f"{stack.emulator_url}/_sim/faults", timeout=10)
    assert tasks[0].status == "SUCCEEDED"
    db = Database(stack.database_url)
    with db.transaction() as session:
        detail = queries.task_detail(session, tasks[0].id)
    moves = [e["to"] for e in detail["events"] if e["applied"]]
    assert "SUBMIT_UNKNOWN" in moves and moves[moves.index("SUBMIT_UNKNOWN") + 1] == "SUBMITTED"
    assert len(detail["attempts"]) == 1
    assert sum(j["request_key"].startswith(tasks[0].id) for j in emulator_jobs()) == 1
    assert_ledger_balanced(stack, [tasks[0].id])
