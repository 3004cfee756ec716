"""transition-in-work-v2 on the time-skipping server: the main line's moves ride on the steps they follow
(submit's transactions A and B, the status call, the output's fetch, the settle that ends the task), so
a task that goes straight through records no local activity (lean-path-v1: the prepare step carries the
first moves, the media step the strays read, the settle and the ending); a step that does not commit a
move it was given (an activity worker from before the patch) leaves it to record_transition, and the
task goes through the same states with the same state events.

`REELQUEUE_RECORD_HISTORIES=1` records the histories into tests/fixtures/histories/generation/transition-in-work-v2/.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from temporalio.client import WorkflowHandle
from workflow_fakes import TASK_ID, World, accepted, ending, job

from contracts.provider import ErrorClass, JobStatus
from contracts.task import TaskStatus as S
from workflows.generation.patches import TRANSITIONS_CARRIED
from workflows.generation.steps import LOCAL_STEPS

HISTORY_FOLDER = TRANSITIONS_CARRIED

MAIN_LINE = ["VALIDATING", "QUOTA_RESERVED", "QUEUED", "DISPATCHING", "SUBMITTED", "RUNNING", "OUTPUT_FETCHING",
             "POST_PROCESSING", "SUCCEEDED"]
MAIN_EVENTS = ["validation_started", "validation_passed", "queued", "dispatch_claimed", "provider_accepted",
               "provider_running", "provider_succeeded", "output_persisted", "playable_asset_ready"]


async def local_activities(handle: WorkflowHandle) -> list[str]:
    """The local activities a run recorded (one marker each), in order: moves and reads, not the
    steps that run as local activities since local-db-steps-v1 (reserve_credit, settle)."""
    history = await handle.fetch_history()
    names = []
    for e in history.events:
        marker = e.marker_recorded_event_attributes
        if e.HasField("marker_recorded_event_attributes") and marker.marker_name == "core_local_activity":
            names.append(json.loads(marker.details["data"].payloads[0].data)["activity_type"])
    return [n for n in names if n not in {step.__name__ for step in LOCAL_STEPS}]


def state_events(world: World) -> list[tuple[str, str, dict]]:
    """Every applied move as Postgres keeps it: its source id, event and payload."""
    return [(t.source_event_id, t.event.value, t.payload) for t in world.transitions]


async def test_a_task_that_goes_straight_through_records_no_local_activity(world: World, run_world):
    handle = await run_world()
    assert await ending(handle) == "completed"
    assert world.moves() == MAIN_LINE and world.sums() == {"RESERVE": 4, "SETTLE": 3, "RELEASE": 1}
    assert await local_activities(handle) == [], "the prepare and media steps carry the first and last moves"
    assert [(source, event) for source, event, _ in state_events(world)] == [
        (f"{TASK_ID}:{n}:{event}", event) for n, event in enumerate(MAIN_EVENTS, start=1)], \
        "the same state events, numbered as when each was recorded on its own"
    payloads = {event: payload for _, event, payload in state_events(world)}
    assert payloads["provider_accepted"] == {"job_id": "job-1"}
    assert payloads["output_persisted"] == {"raw_key": "raw/job-1.mp4", "sha256": "0" * 64}
    assert payloads["playable_asset_ready"]["proxy"] == "proxy/main.mp4"
    [sent] = world.called("submit")
    assert [m.event.value for m in sent.moves] == ["dispatch_claimed"]
    assert sent.accepted.event.value == "provider_accepted"
    assert [sorted(p.move_on) for p in world.called("poll_job")] == [["running", "succeeded"], ["succeeded"]]
    [media] = world.called("make_media")
    assert [m.event.value for m in media.close.moves] == ["playable_asset_ready"] and not world.called("settle")


async def test_a_failure_is_committed_with_the_ledger_that_closes_it(world: World, run_world):
    world.polls = [job(JobStatus.FAILED, cost=0.0, error_class=ErrorClass.MODERATION, error="SAFETY.INPUT")]
    handle = await run_world()
    assert await ending(handle) == "failed:FAILED_FINAL"
    assert world.moves()[-2:] == ["SUBMITTED", "FAILED_FINAL"] and world.sums() == {"RESERVE": 4, "RELEASE": 4}
    [settled] = world.called("settle")
    [final] = settled.moves
    assert (final.event.value, final.error_class, final.error) == ("final_failure", "moderation", "SAFETY.INPUT")
    assert await local_activities(handle) == ["unaccounted_strays"]


async def test_activity_workers_from_before_the_patch_leave_the_moves_to_the_workflow(world: World, run_world):
    """Workers not yet deployed ignore the moves: each is recorded on its own, the refused submit (its
    task not DISPATCHING yet) is asked again once the dispatch is recorded, and nothing else changes."""
    world.carries = False
    handle = await run_world()
    assert await ending(handle) == "completed"
    assert world.moves() == MAIN_LINE and world.sums() == {"RESERVE": 4, "SETTLE": 3, "RELEASE": 1}
    assert [(source, event) for source, event, _ in state_events(world)] == [
        (f"{TASK_ID}:{n}:{event}", event) for n, event in enumerate(MAIN_EVENTS, start=1)]
    assert {event: payload for _, event, payload in state_events(world)}["provider_accepted"] == {"job_id": "job-1"}
    assert [len(s.moves) for s in world.called("submit")] == [1, 0], "refused once, then sent once"
    assert len(world.called("request_slot")) == 1
    # the prepare and media steps (lean-path-v1) are new: they carry theirs on any worker that has them
    assert await local_activities(handle) == ["record_transition"] * 5


async def test_a_dispatch_the_table_refuses_in_the_submit_step_sends_nothing(env, world: World, run_world):
    """The task was cancelled outside while it waited for its slot: submit's transaction A refuses the
    dispatch, nothing reaches the provider, and the workflow cleans up as after a refused move."""
    world.submits = [accepted("job-1"), accepted("job-2")]
    world.hold("request_slot")
    handle = await run_world()
    await asyncio.wait_for(world.entered["request_slot"].wait(), timeout=30)
    world.status = S.CANCELED  # `reelqueue cancel` in Postgres
    world.release("request_slot")
    assert await ending(handle) == "completed"
    assert world.status is S.CANCELED and world.sums() == {"RESERVE": 4, "RELEASE": 4}
    assert ("dispatch_claimed", "CANCELED", False) in world.events
    assert len(world.called("submit")) == 1 and len(world.submits) == 2, "no provider answer was used"
    assert not world.called("poll_job")


@pytest.mark.parametrize("status", [JobStatus.RUNNING, JobStatus.SUCCEEDED])
async def test_a_status_call_commits_only_the_move_its_status_calls_for(world: World, run_world, status):
    world.polls = [job(status), job(JobStatus.SUCCEEDED)]
    handle = await run_world()
    assert await ending(handle) == "completed"
    running = ["RUNNING"] if status is JobStatus.RUNNING else []
    assert world.moves() == MAIN_LINE[:5] + running + MAIN_LINE[6:]
    assert await local_activities(handle) == []
