"""Postgres or object storage out of reach for longer than a step's retry budget (degradation-v1), on
the time-skipping server: the step runs again after a pause instead of ending the task, no paid
attempt is spent on it, and the task's deadline still ends the wait.

`REELQUEUE_RECORD_HISTORIES=1` records the histories into tests/fixtures/histories/generation/degradation-v1/.
"""

from __future__ import annotations

from workflow_fakes import World, accepted, ending, unavailable, until

from activities.fetch import FetchActivities
from activities.prepare import PrepareActivities
from activities.submit import SubmitActivities
from contracts.task import TaskStatus as S
from workflows.generation.patches import DEGRADATION
from workflows.generation.steps import STEPS

HISTORY_FOLDER = DEGRADATION


def budget(step) -> int:
    """How many tries the step's retry policy allows."""
    return STEPS[step][1].maximum_attempts


async def outage_past_budget(env, world: World, run_world, step, script: list, waiting: S, message: str) -> list:
    """`step` fails DependencyUnavailable for 4 tries more than its budget, then works: the task waits
    in `waiting` meanwhile and ends SUCCEEDED with one submit. Returns the submits made during the wait."""
    tries = budget(step) + 4
    script[:] = [unavailable(message)] * tries + [None]
    handle = await run_world()
    await until(env, lambda: len(world.called(step.__name__)) > budget(step), tries=200)
    assert world.status is waiting, "waiting for the dependency, not ended"
    submitted_meanwhile = list(world.called("submit"))
    assert await ending(handle) == "completed"
    assert world.status is S.SUCCEEDED and "FAILED_FINAL" not in world.moves()
    assert len(world.called(step.__name__)) == tries + 1
    assert len(world.called("submit")) == 1 and world.balanced()
    return submitted_meanwhile


async def test_a_ledger_refusing_writes_past_the_budget_delays_the_reservation_and_nothing_is_submitted(
        env, world: World, run_world):
    submitted = await outage_past_budget(env, world, run_world, PrepareActivities.prepare_task, world.reserves,
                                         S.CREATED, "the database refused the statement: lock not available")
    assert submitted == [], "no job is submitted before its reservation is written"


async def test_a_submit_that_cannot_reach_the_database_spends_no_paid_attempt(env, world: World, run_world):
    world.submits = [unavailable()] * (budget(SubmitActivities.submit) + 3) + [accepted("job-1")]
    handle = await run_world()
    assert await ending(handle) == "completed"
    assert world.status is S.SUCCEEDED
    assert world.called("reconcile_submit") == [], "no unknown outcome: the submit is run again, not reconciled"
    assert {ref.attempt_no for ref in world.called("submit")} == {1}
    assert world.balanced()


async def test_object_storage_down_past_the_fetch_budget_keeps_the_task_in_output_fetching(
        env, world: World, run_world):
    await outage_past_budget(env, world, run_world, FetchActivities.fetch_output, world.fetches, S.OUTPUT_FETCHING,
                             "object storage is unreachable")


async def test_the_task_deadline_still_ends_the_wait(env, world: World, run_world):
    world.task_deadline_s = 900.0
    world.fetches = [unavailable("object storage is unreachable")]  # never comes back
    handle = await run_world()
    assert await ending(handle) == "failed:FAILED_FINAL"
    assert world.status is S.FAILED_FINAL
    assert world.balanced(), "the job was paid for: its cost is settled"
    calls = world.times("fetch_output")
    assert (calls[-1] - calls[0]).total_seconds() >= 600, "it waited until the task's deadline"
    assert len(calls) > budget(FetchActivities.fetch_output), "past the step's own budget"
