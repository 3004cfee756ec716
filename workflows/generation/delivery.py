"""Delivery: a succeeded job's video into our storage, its proxy and renditions, then the review
or the ending. Paid for: a cancel now is too late."""

from __future__ import annotations

from typing import NoReturn

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.fetch import FetchActivities
    from activities.media import MediaActivities
    from activities.media_step import MediaStepActivities
    from contracts.messages import JobRef, MediaChecks, MediaStepInput, SettleInput, TranscodeInput
    from contracts.task import TaskEvent

from workflows.generation.following import TOO_LATE
from workflows.generation.patches import LEAN_PATH, RENDITIONS
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
            made = None
            if self._patched(LEAN_PATH):
                made = await self._run(MediaStepActivities.make_media, self._media_step(raw.asset_id))
                proxy = made.proxy
            elif renditions:
                proxy = await self._run(MediaActivities.transcode_proxy, media)
            else:
                proxy = (await self._run(MediaActivities.transcode, media)).proxy
        except ActivityError as exc:
            await self._end(TaskEvent.FINAL_FAILURE, error=describe(exc),
                            error_class=error_type(exc) or "activity_failed")
        ready = {"proxy": proxy.key}
        if made is not None:
            ready["renditions"] = made.renditions
            if made.closed is not None:  # settled and ended in the step's last transaction
                await self._end(TaskEvent.PLAYABLE_ASSET_READY, payload=ready, closed=made.closed)
        elif renditions:
            ready["renditions"] = await self._renditions(media)
        await self._review(proxy, made.checks if made is not None else None)
        late = self._cancel is not None
        await self._end(TaskEvent.PLAYABLE_ASSET_READY, payload=ready, cancel_outcome=TOO_LATE if late else None)

    def _media_step(self, raw_asset_id: str) -> MediaStepInput:
        """The media step's request (lean-path-v1): the checks `_review` would run, and, for a task
        with no review to wait for, no cancel, no duplicate job being accounted and no earlier review,
        its settle and ending."""
        policy = self._checks_policy()
        checks = None if policy is None else MediaChecks(aspect_ratio=self._info.aspect_ratio,
                                                         duration_s=self._info.duration_s, policy=policy)
        closable = ((policy is None or not policy.required) and self._cancel is None and not self._strays
                    and self._booked is None and self._live is None)
        close = SettleInput(task_id=self._task_id, run=self._run_no, attempt_no=self._attempt_no or None,
                            cost=self._cost(), reason=TaskEvent.PLAYABLE_ASSET_READY.value,
                            moves=[self._offer(TaskEvent.PLAYABLE_ASSET_READY)]) if closable else None
        return MediaStepInput(task_id=self._task_id, attempt_no=self._attempt_no, raw_asset_id=raw_asset_id,
                              checks=checks, close=close)

    async def _renditions(self, media: TranscodeInput) -> dict[str, str]:
        """HLS and thumbnail with their own retries. A failure never costs the task its proxy: it
        stays recorded on its rendition row (FAILED, with the error) for a later retry."""
        self._tell("transcoding", "making the HLS rendition and the thumbnail")
        try:
            made = await self._run(MediaActivities.make_renditions, media)
        except ActivityError as exc:
            return {"failed": describe(exc)}
        return made.summary()
