"""Outputs that survive real trouble, on the real stack (emulator, Temporal, Postgres, S3, ffmpeg).

An output URL that dies mid-task is asked for again and the task succeeds; an HLS step that keeps
failing leaves the task SUCCEEDED with its proxy and a FAILED rendition row that a later run of
`reelqueue renditions --retry` turns READY; a transcode slowed past the 60 s heartbeat timeout the step once
had still succeeds, because ffmpeg's progress drives the heartbeats.
"""

from __future__ import annotations

import httpx
import pytest
from cli_helpers import run_cli_async
from stack_helpers import assert_ledger_balanced, import_small, run_all
from temporalio.api.enums.v1 import EventType

from activities import failpoints
from activities.media import RENDITION_TRIES
from adapters.media.transcode import probe
from adapters.storage import ObjectStorage
from schema import queries
from schema.db import Database

pytestmark = [pytest.mark.integration, pytest.mark.long]


@pytest.fixture
def arm(monkeypatch: pytest.MonkeyPatch):
    """Arm failpoints in this process (the test's in-process worker reads them)."""

    def set_points(spec: str) -> None:
        monkeypatch.setenv(failpoints.ENV, spec)
        failpoints._armed.cache_clear()

    yield set_points
    monkeypatch.delenv(failpoints.ENV, raising=False)
    failpoints._armed.cache_clear()


def _detail(stack, task_id: str) -> dict:
    with Database(stack.database_url).transaction() as session:
        return queries.task_detail(session, task_id)


async def test_expired_urls_and_a_failing_hls_still_end_succeeded_and_recoverable(
    stack, client, task_queue, tmp_path, arm, monkeypatch
):
    faults = f"{stack.emulator_url}/_sim/faults"
    httpx.post(faults, json={"expire_output_urls": 2}, timeout=10).raise_for_status()
    arm("make_hls=error")
    try:
        summary = import_small(stack, tmp_path, [("P-EXP", "Trail Runner", "Shoe")])
        (task,) = await run_all(client, stack, summary.import_id, task_queue)
        left = httpx.get(faults, timeout=10).json()["expire_output_urls"]
    finally:
        httpx.delete(faults, timeout=10)
    assert task.status == "SUCCEEDED"
    detail = _detail(stack, task.id)
    assets = {a["kind"]: a for a in detail["assets"]}
    assert left == 0 and assets["RAW_OUTPUT"]["meta"]["url_refreshes"] >= 1  # a dead URL was asked for again
    rows = {r["profile"]: r for r in detail["renditions"]}
    assert rows["PROXY"]["status"] == "READY" and rows["THUMBNAIL"]["status"] == "READY"
    assert rows["HLS"]["status"] == "FAILED" and "failpoint make_hls" in rows["HLS"]["error"]
    assert rows["HLS"]["attempts"] == RENDITION_TRIES  # tried again inside the media step, then left FAILED
    assert "HLS" not in assets and detail["task"]["output_asset_id"] == assets["PROXY"]["id"]
    ready = [e for e in detail["events"] if e["to"] == "SUCCEEDED"][0]
    assert ready["payload"]["renditions"] == {"HLS": "FAILED", "THUMBNAIL": "READY"}
    storage = ObjectStorage.from_settings(stack)
    storage.get_to_file(assets["PROXY"]["key"], tmp_path / "proxy.mp4")
    assert probe(tmp_path / "proxy.mp4").video_codec == "h264"
    assert_ledger_balanced(stack, [task.id])

    listed = await run_cli_async("renditions", task.id, "--json")
    assert listed.code == 1 and {r["profile"]: r["status"] for r in listed.json["renditions"]}["HLS"] == "FAILED"
    arm("")  # the trouble is over: the operator retries; only what failed is made again
    monkeypatch.setenv("REELQUEUE_TASK_QUEUE", task_queue)  # the CLI starts the retry on this test's worker
    retried = await run_cli_async("renditions", task.id, "--retry", "--json")
    assert retried.code == 0 and retried.json["retried"] and retried.json["error"] is None, retried.stdout
    rows = {r["profile"]: r for r in retried.json["renditions"]}
    assert {p: r["status"] for p, r in rows.items()} == {"HLS": "READY", "PROXY": "READY", "THUMBNAIL": "READY"}
    assert rows["HLS"]["attempts"] == RENDITION_TRIES + 1 and rows["THUMBNAIL"]["attempts"] == 1
    hls = {a["kind"]: a for a in _detail(stack, task.id)["assets"]}["HLS"]
    assert "#EXT-X-ENDLIST" in storage.read_bytes(hls["key"]).decode()
    again = await run_cli_async("renditions", task.id, "--retry")
    assert again.code == 0 and "nothing to retry" in again.stdout
    assert (await run_cli_async("renditions", "no-such-task", "--json")).code == 2


@pytest.mark.timeout(600)  # its run may take 400 s
async def test_a_transcode_slower_than_the_old_heartbeat_timeout_succeeds(
    stack, client, task_queue, tmp_path, arm
):
    arm("slow_transcode=slow")  # ffmpeg reads the clip so slowly that the proxy takes ~65 s
    summary = import_small(stack, tmp_path, [("P-SLOW", "Pour Over Set", "Coffee")])
    (task,) = await run_all(client, stack, summary.import_id, task_queue, timeout=400)
    assert task.status == "SUCCEEDED"
    history = await client.get_workflow_handle(task.workflow_id).fetch_history()
    scheduled = {e.event_id: e for e in history.events
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                 and e.activity_task_scheduled_event_attributes.activity_type.name == "make_media"}
    (start,) = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
                and e.activity_task_started_event_attributes.scheduled_event_id in scheduled]
    (done,) = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
               and e.activity_task_completed_event_attributes.scheduled_event_id in scheduled]
    took = done.event_time.ToDatetime() - start.event_time.ToDatetime()
    assert took.total_seconds() > 60, took  # past the 60 s heartbeat timeout, in one try
    assert start.activity_task_started_event_attributes.attempt == 1
    assert_ledger_balanced(stack, [task.id])
