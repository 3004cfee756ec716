"""An output's fetch is dispatched by how soon its provider URL expires (expiry-first-v1), on the
time-skipping server: the priority key of each `fetch_output` the workflow schedules, read from its
history, follows the expiry the successful status call reported, and is worked out again at each run
after a wait for object storage.

`REELQUEUE_RECORD_HISTORIES=1` records the histories into tests/fixtures/histories/generation/expiry-first-v1/.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity
from workflow_fakes import RUNNING, SUCCEEDED, World, ending, unavailable

from activities.fetch import FetchActivities
from contracts.messages import PollResult
from contracts.task import TaskStatus as S
from workflows.generation.patches import EXPIRY_FIRST
from workflows.generation.steps import STEPS

HISTORY_FOLDER = EXPIRY_FIRST


def succeeded_expiring_in(minutes: float):  # noqa: ANN201
    """A status call saying the job succeeded, its output URL expiring `minutes` after the call (server time)."""
    def answer() -> PollResult:
        at = activity.info().current_attempt_scheduled_time + timedelta(minutes=minutes)
        return SUCCEEDED.model_copy(update={"output_expires_at": at})
    return answer


async def fetch_priorities(handle) -> list[int]:  # noqa: ANN001
    """The priority key of each `fetch_output` the workflow scheduled, in order (0: none set)."""
    history = await handle.fetch_history()
    return [e.activity_task_scheduled_event_attributes.priority.priority_key for e in history.events
            if e.HasField("activity_task_scheduled_event_attributes")
            and e.activity_task_scheduled_event_attributes.activity_type.name == "fetch_output"]


async def test_an_output_whose_url_expires_within_15_minutes_is_fetched_at_priority_1(world: World, run_world):
    world.polls = [RUNNING, succeeded_expiring_in(10)]
    handle = await run_world()
    assert await ending(handle) == "completed"
    assert await fetch_priorities(handle) == [1]


async def test_an_output_with_hours_left_or_no_known_expiry_keeps_the_default_priority(world: World, run_world):
    world.polls = [RUNNING, succeeded_expiring_in(180)]
    handle = await run_world()
    assert await ending(handle) == "completed"
    assert await fetch_priorities(handle) == [0], "an unset key: the queue's default (3)"


async def test_after_a_wait_for_storage_the_fetch_is_rescheduled_with_the_time_left_then(world: World, run_world):
    """16 minutes left when the job succeeded (key 2); storage down past the fetch's budget, so the
    step runs again after a pause, with under 15 minutes left: key 1."""
    world.polls = [RUNNING, succeeded_expiring_in(16)]
    world.fetches = [unavailable("object storage is unreachable")] * (STEPS[FetchActivities.fetch_output][1]
                                                                      .maximum_attempts + 1) + [None]
    handle = await run_world()
    assert await ending(handle) == "completed"
    assert world.status is S.SUCCEEDED
    assert await fetch_priorities(handle) == [2, 1]
