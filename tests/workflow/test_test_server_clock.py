"""The shared time-skipping server's clock (tests/README.md): a workflow terminated with an activity
in flight keeps the server's time-skipping lock for good; the teardown's `terminate_between_tasks`
waits for the activity to end first, so the clock goes on skipping for the next test."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from server_clock import clock_skips, terminate_between_tasks
from temporalio import activity, workflow
from temporalio.worker import Worker

LET_GO = asyncio.Event()


@activity.defn
async def waits_to_be_let_go() -> None:
    await LET_GO.wait()


@workflow.defn(sandboxed=False)
class OneActivity:
    @workflow.run
    async def run(self) -> None:
        await workflow.execute_activity(waits_to_be_let_go, start_to_close_timeout=timedelta(hours=1))


async def test_a_terminate_during_an_activity_stalls_the_server_clock(own_env):
    """The test server's behaviour the teardown works around (if this starts failing, a newer
    server gives the lock back and `terminate_between_tasks` is no longer needed)."""
    LET_GO.clear()
    queue = f"clock-{uuid.uuid4().hex[:8]}"
    async with Worker(own_env.client, task_queue=queue, workflows=[OneActivity], activities=[waits_to_be_let_go]):
        handle = await own_env.client.start_workflow(OneActivity.run, id=queue, task_queue=queue)
        while not (await handle.describe()).raw_description.pending_activities:
            await asyncio.sleep(0.02)
        await handle.terminate("mid-activity")
        LET_GO.set()
        assert not await clock_skips(own_env, within_s=5)  # stalled: the hour would pass in real time


async def test_leftovers_are_terminated_between_tasks_and_the_clock_still_skips(env, world, run_world):
    world.hold("submit")
    handle = await run_world()
    await asyncio.wait_for(world.entered["submit"].wait(), timeout=30)
    world.release("submit")  # as the teardown does with every activity a test still holds
    await terminate_between_tasks(env, [handle])
    assert (await handle.describe()).status.name == "TERMINATED"
    assert await clock_skips(env)
