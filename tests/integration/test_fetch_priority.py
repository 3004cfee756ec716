"""Outputs closest to expiring are fetched first when fetches pile up (expiry-first-v1), on the stack's
real Temporal dev server as `devstack` starts it: a workflow schedules `fetch_output` for outputs with
different times left, with the priority the generation workflow gives them (`fetch_priority`), while no
worker polls their queue (as when object storage was down and the fetches all come due together);
then one worker with one slot takes them, one at a time, in priority order."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from temporalio import activity, workflow
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from workflows.queues import fetch_priority

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

# Minutes left on each output's URL, in the order the fetches are scheduled (None: no known expiry).
MINUTES_LEFT: list[float | None] = [180, 40, None, 5, 90, 30, 12, 600, 50, 1, None, 20, 14, 240, 8, 45, 70, 3]


def key_of(minutes_left: float | None) -> int:
    """The priority key a fetch with this much time left gets (3 when none is set)."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    expires = None if minutes_left is None else now + timedelta(minutes=minutes_left)
    return fetch_priority(expires, now).priority_key or 3


@workflow.defn(sandboxed=False)
class FetchBacklog:
    """Schedules one `fetch_output` per output on the queue it is given, each with its priority."""

    @workflow.run
    async def run(self, args: tuple[str, list[float | None]]) -> None:
        queue, minutes_left = args
        now = workflow.now()
        await asyncio.gather(*(
            workflow.execute_activity(
                "fetch_output", i, task_queue=queue, start_to_close_timeout=timedelta(seconds=30),
                priority=fetch_priority(None if left is None else now + timedelta(minutes=left), now))
            for i, left in enumerate(minutes_left)))


async def test_a_backlog_of_fetches_is_taken_soonest_expiring_first(client):
    queue = f"backlog-{uuid.uuid4().hex[:10]}"
    fetch_queue = f"{queue}-fetch"
    taken: list[int] = []

    @activity.defn(name="fetch_output")
    async def fetch_output(i: int) -> None:
        taken.append(i)

    async with Worker(client, task_queue=queue, workflows=[FetchBacklog]):
        handle = await client.start_workflow(FetchBacklog.run, (fetch_queue, MINUTES_LEFT), id=queue, task_queue=queue)
        for _ in range(100):  # every fetch scheduled, none taken: nobody polls their queue yet
            if len((await handle.describe()).raw_description.pending_activities) == len(MINUTES_LEFT):
                break
            await asyncio.sleep(0.1)
        async with Worker(client, task_queue=fetch_queue, activities=[fetch_output], max_concurrent_activities=1):
            await handle.result()

    keys = [key_of(MINUTES_LEFT[i]) for i in taken]
    assert sorted(taken) == list(range(len(MINUTES_LEFT)))
    assert keys == sorted(keys), f"taken in priority order (minutes left: {[MINUTES_LEFT[i] for i in taken]})"
    soon = [left for left in MINUTES_LEFT if left is not None and left < 15]
    assert sorted(MINUTES_LEFT[i] for i in taken[:len(soon)]) == sorted(soon), "the URLs under 15 minutes first"
