"""Live details and import pause on the time-skipping server: the `details` query and the Web UI's
current details follow the task (waiting for a slot, paused, its job's status and progress), each
activity call carries a summary, and a paused import's task submits nothing until it is resumed
(import-pause-v1).

`REELQUEUE_RECORD_HISTORIES=1` records the pause paths into tests/fixtures/histories/generation/import-pause-v1/.
"""

from __future__ import annotations

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from workflow_fakes import SUCCEEDED, ending, job, until

from contracts import workflow_api as api
from contracts.messages import LiveDetails, PauseRequest
from contracts.provider import JobStatus
from contracts.task import TaskStatus as S
from workflows.generation.patches import IMPORT_PAUSE


async def details(handle) -> LiveDetails:  # noqa: ANN001
    return await handle.query(api.QUERY_DETAILS, result_type=LiveDetails)


async def current_details(handle) -> str:  # noqa: ANN001
    """What the Web UI shows: the built-in metadata query's current details."""
    meta = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return meta.current_details


async def test_details_follow_the_job_and_every_activity_has_a_summary(env, world, run_world):
    world.polls = [job(JobStatus.RUNNING).model_copy(update={"progress": 0.63})]
    handle = await run_world()
    await until(env, lambda: len(world.called("poll_job")) >= 2, step_s=1.0)
    now = await details(handle)
    assert (now.step, now.status, now.job_id, now.job_status, now.progress) == (
        "following_job", "RUNNING", "job-1", "running", 0.63)
    assert "job job-1 at fake: running, 63%" in await current_details(handle)
    world.polls = [SUCCEEDED]
    assert await ending(handle) == "completed"
    assert (await details(handle)).step == "ended"
    history = await handle.fetch_history()
    summaries = {}
    for e in history.events:  # lean-path-v1: no local step on a straight run (prepare and media steps)
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            summary = e.user_metadata.summary
            summaries[e.activity_task_scheduled_event_attributes.activity_type.name] = summary.data.decode()
    assert summaries["submit"] == '"submit · attempt 1"'
    assert summaries["poll_job"] == '"poll_job · attempt 1 · job job-1"'
    assert set(summaries) >= {"prepare_task", "request_slot", "fetch_output", "make_media"}


@pytest.mark.histories(IMPORT_PAUSE)
async def test_a_task_of_a_paused_import_asks_for_no_slot_until_resumed(env, world, run_world):
    world.paused_by = "ops"
    handle = await run_world()
    await until(env, lambda: world.status is S.QUEUED, step_s=1.0)
    await env.sleep(3600)
    now = await details(handle)
    assert (now.step, now.waiting_for) == ("paused", "paused by ops")
    assert world.called("request_slot") == [] and world.called("submit") == []
    await handle.signal(api.SIGNAL_PAUSE, PauseRequest(paused=False, by="ops"))
    assert await ending(handle) == "completed"
    assert world.status is S.SUCCEEDED and len(world.called("submit")) == 1 and world.balanced()


@pytest.mark.histories(IMPORT_PAUSE)
async def test_a_task_paused_while_in_line_leaves_it_and_keeps_its_place(env, world, run_world):
    world.hold("request_slot")
    handle = await run_world()
    await world.entered["request_slot"].wait()
    await handle.signal(api.SIGNAL_PAUSE, PauseRequest(paused=True, by="ops"))
    world.release("request_slot")
    await until(env, lambda: len(world.called("request_slot")) == 1, step_s=1.0)
    await env.sleep(3600)
    assert world.called("submit") == [] and (await details(handle)).step == "paused"
    await handle.signal(api.SIGNAL_PAUSE, PauseRequest(paused=False, by="ops"))
    assert await ending(handle) == "completed"
    asks = world.called("request_slot")
    assert len(asks) == 2 and asks[0].request.requested_at == asks[1].request.requested_at  # its first place
    assert len(world.called("submit")) == 1 and world.balanced()
