"""GenerationWorkflow's media step, on the time-skipping server with fake activities.

The proxy MP4 decides SUCCEEDED; HLS and thumbnail are made in the same step (lean-path-v1: make_media;
renditions-v1 made them a step of their own), and a failure of theirs is recorded (their rows, the
SUCCEEDED payload), never the task's.
RenditionsWorkflow runs that step again on an operator's request.
"""

from __future__ import annotations

import uuid

import pytest
from histories import DEFAULT_PATCH, record
from temporalio import activity
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker
from workflow_fakes import ending, media_worker, outage

from activities.errors import OUTPUT_INVALID
from contracts import workflow_api as api
from contracts.messages import RenditionOut, RenditionProfile, RenditionsResult, RenditionStatus, TranscodeInput
from workflows.renditions import RenditionsWorkflow

UNREADABLE = ApplicationError("unreadable", type=OUTPUT_INVALID, non_retryable=True)

MAIN_LINE = ["VALIDATING", "QUOTA_RESERVED", "QUEUED", "DISPATCHING", "SUBMITTED", "RUNNING",
             "OUTPUT_FETCHING", "POST_PROCESSING", "SUCCEEDED"]


def _ready_payload(world) -> dict:
    (last,) = [t for t in world.transitions if t.event.value == "playable_asset_ready"]
    return last.payload


async def test_proxy_then_renditions_then_succeeded(world, run_world):
    assert await ending(await run_world()) == "completed"
    assert world.moves() == MAIN_LINE
    assert len(world.called("make_media")) == 1
    # the separate steps are for workflows started before lean-path-v1 (and renditions-v1)
    assert world.called("transcode_proxy") == world.called("make_renditions") == world.called("transcode") == []
    assert _ready_payload(world) == {"proxy": "proxy/main.mp4", "renditions": {"HLS": "READY", "THUMBNAIL": "READY"}}
    assert world.sums() == {"RESERVE": 4, "SETTLE": 3, "RELEASE": 1}


async def test_a_failing_hls_is_recorded_and_never_fails_the_task(world, run_world):
    world.renditions = [outage("HLS of main.mp4: exit 1")]  # every try fails
    assert await ending(await run_world()) == "completed"
    assert world.moves() == MAIN_LINE
    assert len(world.called("make_media")) == 1  # a failed rendition does not fail the step
    payload = _ready_payload(world)
    assert payload["proxy"] == "proxy/main.mp4" and payload["renditions"]["HLS"] == "FAILED"
    assert world.balanced()


async def test_an_unreadable_output_fails_the_task_without_renditions(world, run_world):
    world.proxies = [ApplicationError("raw output cannot be transcoded: cannot probe", type=OUTPUT_INVALID,
                                      non_retryable=True)]
    assert await ending(await run_world()) == "failed:FAILED_FINAL"
    assert world.moves()[-1] == "FAILED_FINAL"
    assert len(world.called("make_media")) == 1  # not retried
    assert world.balanced()


async def _retry_run(env, answers: list) -> tuple[RenditionsResult | BaseException, int]:
    """RenditionsWorkflow against a fake make_renditions giving `answers` in turn: (result, calls)."""
    calls = []

    @activity.defn(name="make_renditions")
    async def make_renditions(req: TranscodeInput) -> RenditionsResult:
        calls.append(req)
        answer = answers[min(len(calls), len(answers)) - 1]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    queue = f"rend-{uuid.uuid4().hex[:8]}"
    handle = None
    async with Worker(env.client, task_queue=queue, workflows=[RenditionsWorkflow], activities=[make_renditions]), \
            media_worker(env.client, queue, [make_renditions]):
        try:
            handle = await env.client.start_workflow(
                api.RENDITIONS_WORKFLOW_NAME, TranscodeInput(task_id="t1", raw_asset_id="raw-1"),
                id=api.renditions_id("t1") + queue, task_queue=queue, result_type=RenditionsResult)
            result: RenditionsResult | BaseException = await handle.result()
        except WorkflowFailureError as exc:
            result = exc
        await record(handle, DEFAULT_PATCH, f"renditions-workflow-{len(calls)}-calls")
    return result, len(calls)


READY = RenditionsResult(renditions=[RenditionOut(profile=RenditionProfile.HLS, status=RenditionStatus.READY)])


async def test_a_renditions_retry_runs_the_step_until_it_succeeds(env):
    result, calls = await _retry_run(env, [outage("HLS: exit 1"), READY])
    assert result == READY and calls == 2


@pytest.mark.parametrize("failure, tries", [(outage("HLS: exit 1"), 4), (UNREADABLE, 1)])
async def test_a_renditions_retry_gives_up_after_its_budget(env, failure, tries):
    result, calls = await _retry_run(env, [failure])
    assert isinstance(result, WorkflowFailureError) and calls == tries
