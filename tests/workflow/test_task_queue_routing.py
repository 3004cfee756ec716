"""task-queues-v1: media steps (fetch, proxy, renditions, checks) run on the media queue named after
the workflow's queue, everything else on the workflow's own; the same for RenditionsWorkflow.

`REELQUEUE_RECORD_HISTORIES=1` records the histories into tests/fixtures/histories/<workflow>/task-queues-v1/.
"""

from __future__ import annotations

import uuid

from histories import record
from temporalio import activity
from temporalio.worker import Worker
from workflow_fakes import ending, media_worker, review_policy

from contracts import workflow_api as api
from contracts.messages import RenditionOut, RenditionProfile, RenditionsResult, RenditionStatus, TranscodeInput
from workflows.renditions import RenditionsWorkflow

HISTORY_FOLDER = "task-queues-v1"
MEDIA_STEPS = {"fetch_output", "make_media"}  # lean-path-v1: proxy, renditions and checks are one step


async def test_media_steps_run_on_the_media_queue_and_the_rest_on_the_workflow_queue(world, run_world):
    world.review = review_policy(required=False)  # the automatic checks run, no person is asked
    handle = await run_world()
    assert await ending(handle) == "completed"
    queue = (await handle.describe()).task_queue
    assert set(world.queues) >= MEDIA_STEPS
    assert {name: world.queues[name] for name in MEDIA_STEPS} == dict.fromkeys(MEDIA_STEPS, {api.media_queue(queue)})
    assert {name: q for name, q in world.queues.items() if name not in MEDIA_STEPS} == dict.fromkeys(
        set(world.queues) - MEDIA_STEPS, {queue})
    assert world.balanced()


async def test_a_renditions_retry_runs_on_the_media_queue(env):
    queues = []

    @activity.defn(name="make_renditions")
    async def make_renditions(req: TranscodeInput) -> RenditionsResult:
        queues.append(activity.info().task_queue)
        return RenditionsResult(renditions=[RenditionOut(profile=RenditionProfile.HLS, status=RenditionStatus.READY)])

    queue = f"rend-{uuid.uuid4().hex[:8]}"
    async with Worker(env.client, task_queue=queue, workflows=[RenditionsWorkflow], activities=[]), \
            media_worker(env.client, queue, [make_renditions]):
        handle = await env.client.start_workflow(
            api.RENDITIONS_WORKFLOW_NAME, TranscodeInput(task_id="t1", raw_asset_id="raw-1"),
            id=api.renditions_id("t1") + queue, task_queue=queue, result_type=RenditionsResult)
        await handle.result()
        await record(handle, HISTORY_FOLDER, "renditions-workflow-media-queue")
    assert queues == [api.media_queue(queue)]
