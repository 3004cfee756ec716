"""RenditionsWorkflow: run the renditions step again for one task (`reelqueue renditions --retry`).

GenerationWorkflow ends SUCCEEDED with the proxy even when HLS or the thumbnail kept failing; the
failure stays on its rendition row. This workflow runs the same `make_renditions` activity (same
keys, only what is not READY is made) on the workers, with the same retry budget, so an operator
can retry once the cause is gone without touching the task's own workflow or its ledger.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities.errors import BUSINESS_FAILURES
    from activities.media import MediaActivities
    from contracts import workflow_api as api
    from contracts.messages import RenditionsResult, TranscodeInput
    from workflows.queues import queue_of

TASK_QUEUES = "task-queues-v1"  # workflow.patched: the step runs on the media queue (api.media_queue)


@workflow.defn(name=api.RENDITIONS_WORKFLOW_NAME)
class RenditionsWorkflow:
    @workflow.run
    async def run(self, inp: TranscodeInput) -> RenditionsResult:
        return await workflow.execute_activity_method(
            MediaActivities.make_renditions, inp, task_queue=queue_of("make_renditions", TASK_QUEUES),
            start_to_close_timeout=timedelta(minutes=20), heartbeat_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(initial_interval=timedelta(seconds=2), maximum_interval=timedelta(seconds=30),
                                     maximum_attempts=4, non_retryable_error_types=list(BUSINESS_FAILURES)),
        )
