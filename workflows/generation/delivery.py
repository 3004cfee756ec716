"""Delivery: a succeeded job's video into our storage, its proxy and renditions, then the review
or the ending. Paid for: a cancel now is too late."""

from __future__ import annotations

from typing import NoReturn

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.fetch import FetchActivities
    from activities.media import MediaActivities
    from contracts.messages import JobRef, TranscodeInput
    from contracts.task import TaskEvent

from workflows.generation.following import TOO_LATE
from workflows.generation.patches import RENDITIONS
from workflows.generation.state import RunState
from workflows.generation.steps import describe, error_type


class Delivery(RunState):
    """A succeeded job's video: fetched, transcoded (proxy, then HLS and thumbnail), reviewed when the
    plan asks, then the task ends SUCCEEDED."""

    async def _deliver(self, job: JobRef) -> NoReturn:
        """Copy the output, make the renditions, settle, SUCCEEDED. The provider job is done and
        paid for, so a cancel now is too late and a failure still settles its cost."""
        renditions = self._patched(RENDITIONS)
        try:
            self._tell("fetching", f"copying job {job.job_id}'s video into our storage")
            persist = [self._offer(TaskEvent.OUTPUT_PERSISTED)] if self._carry else []
            raw = await self._run(FetchActivities.fetch_output, job.model_copy(update={"moves": persist}))
            if persist:
                await self._take(persist[0].with_facts(raw_key=raw.key, sha256=raw.sha256), raw.moved)
            else:
                await self._move(TaskEvent.OUTPUT_PERSISTED, payload={"raw_key": raw.key, "sha256": raw.sha256})
            media = TranscodeInput(task_id=self._task_id, raw_asset_id=raw.asset_id)
            self._tell("transcoding", "transcoding the proxy MP4")
            if renditions:
                proxy = await self._run(MediaActivities.transcode_proxy, media)
            else:
                proxy = (await self._run(MediaActivities.transcode, media)).proxy
        except ActivityError as exc:
            await self._end(TaskEvent.FINAL_FAILURE, error=describe(exc),
                            error_class=error_type(exc) or "activity_failed")
        ready = {"proxy": proxy.key}
        if renditions:
            ready["renditions"] = await self._renditions(media)
        await self._review(proxy)
        late = self._cancel is not None
        await self._end(TaskEvent.PLAYABLE_ASSET_READY, payload=ready, cancel_outcome=TOO_LATE if late else None)

    async def _renditions(self, media: TranscodeInput) -> dict[str, str]:
        """HLS and thumbnail with their own retries. A failure never costs the task its proxy: it
        stays recorded on its rendition row (FAILED, with the error) for a later retry."""
        self._tell("transcoding", "making the HLS rendition and the thumbnail")
        try:
            made = await self._run(MediaActivities.make_renditions, media)
        except ActivityError as exc:
            return {"failed": describe(exc)}
        return made.summary()
