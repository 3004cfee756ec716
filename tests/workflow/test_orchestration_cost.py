"""What one task costs the engine (issue 24), on the time-skipping server, read from the workflow's
history: the TaskStatus search attribute is upserted only when the value users filter on changes
(coarse-status-v1), and a run asks one patch, not each of the earlier ones (patch-baseline-v1).

`REELQUEUE_RECORD_HISTORIES=1` records the histories into tests/fixtures/histories/<patch>/.
"""

from __future__ import annotations

import pytest
from temporalio.converter import decode_typed_search_attributes
from workflow_fakes import RUNNING, World, ending, job, outage, resolve, until

from schema.contracts import ErrorClass, JobStatus, ResolveAction
from schema.state_machine import TaskStatus as S
from workflows.generation import COARSE_STATUS, PATCH_BASELINE
from workflows.search_attributes import TASK_STATUS

HISTORY_FOLDER = COARSE_STATUS


async def shown_statuses(handle) -> list[str]:  # noqa: ANN001
    """Each TaskStatus value the workflow upserted, in order."""
    history = await handle.fetch_history()
    shown = []
    for e in history.events:
        if e.HasField("upsert_workflow_search_attributes_event_attributes"):
            upserted = e.upsert_workflow_search_attributes_event_attributes.search_attributes
            value = decode_typed_search_attributes(upserted).get(TASK_STATUS)
            if value is not None:  # the SDK's own upserts (TemporalChangeVersion) carry no TaskStatus
                shown.append(value)
    return shown


async def patch_markers(handle) -> tuple[int, int]:  # noqa: ANN001
    """How many patch markers the workflow recorded, and how many TemporalChangeVersion upserts."""
    history = await handle.fetch_history()
    markers = sum(e.HasField("marker_recorded_event_attributes")
                  and e.marker_recorded_event_attributes.marker_name == "core_patch" for e in history.events)
    versions = sum(e.HasField("upsert_workflow_search_attributes_event_attributes") and "TemporalChangeVersion"
                   in e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
                   for e in history.events)
    return markers, versions


@pytest.mark.histories(PATCH_BASELINE)
async def test_a_run_records_one_patch_for_all_the_earlier_ones(world: World, run_world):
    handle = await run_world()
    assert await ending(handle) == "completed"
    assert world.moves()[-1] == "SUCCEEDED" and world.balanced()
    assert [r.job_id for r in world.called("poll_job")] == ["job-1", "job-1"], "the media and gate paths still run"
    assert len(world.called("request_slot")) == 1 and len(world.called("make_renditions")) == 1
    assert await patch_markers(handle) == (1, 1)


async def test_a_task_that_succeeds_upserts_its_status_twice(world: World, run_world):
    handle = await run_world()
    assert await ending(handle) == "completed"
    assert len(world.moves()) == 9, "nine status changes, as before"
    assert await shown_statuses(handle) == ["RUNNING", "SUCCEEDED"]


async def test_a_failed_task_shows_its_ending(world: World, run_world):
    world.polls = [job(JobStatus.FAILED, cost=0.0, error_class=ErrorClass.MODERATION, error="SAFETY.INPUT")]
    handle = await run_world()
    assert await ending(handle) == "failed:FAILED_FINAL"
    assert await shown_statuses(handle) == ["RUNNING", "FAILED_FINAL"]


async def test_a_task_waiting_for_a_person_shows_it_and_then_running_again(env, world: World, run_world):
    up = {"ok": False}
    world.deadline_s = 900
    world.polls = [RUNNING, lambda: job(JobStatus.SUCCEEDED) if up["ok"] else outage()]
    handle = await run_world()
    await until(env, lambda: world.status is S.NEEDS_ATTENTION)
    up["ok"] = True
    await resolve(handle, ResolveAction.RETRY, "status API is back")
    assert await ending(handle) == "completed"
    assert await shown_statuses(handle) == ["RUNNING", "NEEDS_ATTENTION", "RUNNING", "SUCCEEDED"]
