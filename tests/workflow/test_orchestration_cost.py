"""What one task costs the engine (issue 24), on the time-skipping server, read from the workflow's
history: the TaskStatus search attribute is upserted only when the value users filter on changes
(coarse-status-v1), and a run asks one patch, not each of the earlier ones (patch-baseline-v1).

`REELQUEUE_RECORD_HISTORIES=1` records the histories into tests/fixtures/histories/generation/<patch>/.
"""

from __future__ import annotations

import json

import pytest
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.converter import decode_typed_search_attributes
from workflow_fakes import RUNNING, World, ending, job, outage, resolve, until

from contracts import workflow_api as api
from contracts.messages import ResolveAction
from contracts.provider import ErrorClass, JobStatus
from contracts.task import TaskStatus as S
from workflows.generation.patches import BASELINES, COARSE_STATUS, LEAN_PATH, PATCH_BASELINE
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


async def patches_asked(handle) -> tuple[int, list[str]]:  # noqa: ANN001
    """How many patch markers the workflow recorded, and the patches its last TemporalChangeVersion
    upsert lists (the SDK writes one per patch a run asks)."""
    history = await handle.fetch_history()
    markers = sum(e.HasField("marker_recorded_event_attributes")
                  and e.marker_recorded_event_attributes.marker_name == "core_patch" for e in history.events)
    listed: list[str] = []
    for e in history.events:
        if e.HasField("upsert_workflow_search_attributes_event_attributes"):
            fields = e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
            if "TemporalChangeVersion" in fields:
                listed = json.loads(fields["TemporalChangeVersion"].data)
    return markers, sorted(listed)


@pytest.mark.histories(PATCH_BASELINE)
async def test_a_run_records_one_patch_for_all_the_earlier_ones(world: World, run_world):
    handle = await run_world()
    assert await ending(handle) == "completed"
    assert world.moves()[-1] == "SUCCEEDED" and world.balanced()
    assert [r.job_id for r in world.called("poll_job")] == ["job-1", "job-1"], "the media and gate paths still run"
    assert len(world.called("request_slot")) == 1 and len(world.called("make_media")) == 1
    assert await patches_asked(handle) == (1, [BASELINES[0][0]]), \
        "the newest baseline stands for every patch before it; a later one is asked on its own"


async def test_a_task_that_succeeds_upserts_its_status_twice(world: World, run_world):
    handle = await run_world()
    assert await ending(handle) == "completed"
    assert len(world.moves()) == 9, "nine status changes, as before"
    assert await shown_statuses(handle) == ["RUNNING", "SUCCEEDED"]


async def test_a_task_started_as_running_upserts_only_its_ending(world: World, run_world):
    """The starter set TaskStatus=RUNNING and said so in the start's memo (control/starting.py): the run's
    first upsert, of that same value, is not made. One history event and one billable action a task."""
    handle = await run_world(search_attributes=TypedSearchAttributes([SearchAttributePair(TASK_STATUS, "RUNNING")]),
                             memo={api.MEMO_SHOWN_STATUS: "RUNNING"})
    assert await ending(handle) == "completed"
    assert await shown_statuses(handle) == ["SUCCEEDED"]
    assert world.moves()[-1] == "SUCCEEDED" and world.balanced()


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


async def local_activities(handle) -> list[str]:  # noqa: ANN001
    """The local activities the run recorded (a marker each), in order."""
    history = await handle.fetch_history()
    return [json.loads(e.marker_recorded_event_attributes.details["data"].payloads[0].data)["activity_type"]
            for e in history.events if e.HasField("marker_recorded_event_attributes")
            and e.marker_recorded_event_attributes.marker_name == "core_local_activity"]


@pytest.mark.histories(LEAN_PATH)
async def test_the_prepare_step_commits_the_moves_to_queued_with_its_hold(world: World, run_world):
    """lean-path-v1: one step validates, holds the estimate and moves the task to QUEUED (with its
    deadline); the media step settles and ends it: no move and no ledger step of their own."""
    handle = await run_world()
    assert await ending(handle) == "completed"
    assert world.moves()[:3] == ["VALIDATING", "QUOTA_RESERVED", "QUEUED"] and world.moves()[-1] == "SUCCEEDED"
    [prepare] = world.called("prepare_task")
    assert [m.event.value for m in prepare.moves] == ["validation_started", "validation_passed", "queued"]
    queued = next(t for t in world.transitions if t.event.value == "queued")
    assert queued.deadline_at is not None, "QUEUED records the task's deadline, as before"
    assert await local_activities(handle) == []
    assert not world.called("validate_task") and not world.called("reserve_credit") and not world.called("settle")
    assert world.sums() == {"RESERVE": 4, "SETTLE": 3, "RELEASE": 1}


@pytest.mark.histories(LEAN_PATH)
async def test_without_credit_the_task_ends_from_validating(world: World, run_world):
    world.credit = False
    handle = await run_world()
    assert await ending(handle) == "failed:FAILED_FINAL"
    assert world.moves() == ["VALIDATING", "FAILED_FINAL"] and world.ledger == []
