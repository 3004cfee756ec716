"""Following a job: status calls and webhooks through one reducer until the job ends, and stopping
a job (cancel, then follow it until the provider says it ended)."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.errors import BUSINESS_FAILURES
    from activities.poll import PollActivities
    from contracts.messages import JobRef, PollResult, TransitionInput, TransitionResult
    from contracts.provider import JobStatus
    from contracts.task import TaskEvent, TaskStatus
    from workflows.observations import PollCadence, needs_status_call, terminal

from workflows.generation.patches import WEBHOOK_WAKE
from workflows.generation.state import RunState
from workflows.generation.steps import MAX_POLL_INTERVAL_S, OUTAGE_PAUSE_S, STOP_GRACE, describe, error_type

TOO_LATE = "TOO_LATE"


class Following(RunState):
    """What the provider says about a job moves the task only through `_reduce`, status calls and
    webhooks alike; `_stop_live` cancels a job and follows it until the provider says it ended."""

    async def _follow(self, job: JobRef) -> PollResult:
        """Follow the job until it ends: status calls on a growing interval (a safety net when the
        provider sends webhooks), webhook observations as they come; both go through `_reduce`.
        Returns a terminal result that is not a stop we asked for (that ends the task)."""
        cadence = PollCadence(webhooks=self._webhooks, min_interval_s=self._info.min_poll_interval_s,
                              max_s=MAX_POLL_INTERVAL_S)
        next_call = self._jittered(cadence.first()) if cadence.webhooks else workflow.now()
        last_call, slept_out = None, False
        while True:
            if self._cancel_pending():
                self._cancel_handled = True
                await self._move(TaskEvent.CANCEL_REQUESTED, payload=self._cancel_payload())
                return await self._stop(job, TaskEvent.CANCEL_CONFIRMED)
            update = self._inbox.take(job.job_id)
            if update is not None and not needs_status_call(update):
                await self._reduce(update.status)  # signed and not final: no status call needed
            elif update is not None:  # confirm it with a status call soon, spaced as the provider asks
                soonest = last_call + timedelta(seconds=cadence.floor) if last_call else workflow.now()
                next_call = min(next_call, soonest)
            if slept_out or workflow.now() >= next_call:
                offers = self._reductions() if self._carry else None
                polled = await self._poll(job, offers=offers)
                last_call = workflow.now()
                await self._renew_slot()
                if polled is not None:
                    if await self._reduce(polled.status, offers, polled.moved):
                        return polled
                elif workflow.now() >= self._deadline:
                    await self._attention("poll", f"no status for job {job.job_id} until the task's deadline")
                    self._deadline = workflow.now() + timedelta(seconds=self._info.deadline_s)
                    continue
                next_call = self._jittered(cadence.next() if polled is not None else OUTAGE_PAUSE_S)
            if workflow.now() >= self._deadline:
                return await self._stop(job, TaskEvent.DEADLINE_PASSED,
                                        error="provider job did not finish before the deadline")
            if self._inbox.holds(job.job_id) and self._patched(WEBHOOK_WAKE):
                slept_out = False  # a webhook came while the last step ran: act on it now, not at the next call
                continue
            slept_out = await self._pause_until(next_call, wake_on_update=True)

    async def _reduce(self, status: JobStatus | None, offers: dict[JobStatus, TransitionInput] | None = None,
                      moved: list[TransitionResult] | None = None) -> bool:
        """The one place where what a provider says about the followed job moves the task, whether
        a status call or a webhook said it; True once the job ended. Never moves a task back. A status
        call that carried the moves (`_reductions`, transition-in-work-v2) committed the one its status
        calls for."""
        if offers is not None:
            if status in offers:
                await self._take(offers[status], moved or [])
            return terminal(status)
        if status is JobStatus.RUNNING and self._status is TaskStatus.SUBMITTED:
            await self._move(TaskEvent.PROVIDER_RUNNING)
        if status is JobStatus.SUCCEEDED:
            await self._move(TaskEvent.PROVIDER_SUCCEEDED)
        return terminal(status)

    def _reductions(self) -> dict[JobStatus, TransitionInput]:
        """What `_reduce` would record for each status a status call may observe, offered to the call."""
        offers = {JobStatus.SUCCEEDED: self._offer(TaskEvent.PROVIDER_SUCCEEDED)}
        if self._status is TaskStatus.SUBMITTED:
            offers[JobStatus.RUNNING] = self._offer(TaskEvent.PROVIDER_RUNNING)
        return offers

    async def _poll(self, job: JobRef, *, ask_on_refusal: bool = True,
                    offers: dict[JobStatus, TransitionInput] | None = None) -> PollResult | None:
        """One status call (with the moves it may commit); None while the provider's status API is
        unreachable. A provider that refuses to answer for the job (not an outage) sends the task to a
        person first."""
        try:
            polled = await self._run(PollActivities.poll_job, job.model_copy(update={
                "move_on": offers or {}, **self._release_on_end(job)}))
        except ActivityError as exc:
            if ask_on_refusal and error_type(exc) in BUSINESS_FAILURES:
                await self._attention("poll", f"job {job.job_id}: {describe(exc)}")
            return None
        await self._observe(job, polled)
        return polled

    async def _observe(self, job: JobRef, state: PollResult) -> None:
        """Remember what the provider says an attempt costs (the latest report, never a sum); a job
        that ended gives its slot back."""
        if state.cost is not None:
            self._costs[job.attempt_no] = state.cost
        self._tell("following_job", f"job {job.job_id} at {self._info.provider}: {state.raw_status}"
                   + (f", {state.progress:.0%}" if state.progress is not None else ""),
                   job_id=job.job_id, job_status=state.raw_status, progress=state.progress)
        if state.terminal and self._live is not None and self._live.job_id == job.job_id:
            self._live = None
            await self._release_slot(given=state.released)

    async def _stop(self, job: JobRef, ending: TaskEvent, error: str | None = None) -> PollResult:
        """Cancel the job and end the task with `ending` once it is terminal; a job that succeeded
        meanwhile is returned instead (completion wins: the video is paid for)."""
        final = await self._stop_live(job)
        if final.status is JobStatus.SUCCEEDED:
            if self._status is TaskStatus.CANCEL_REQUESTED:
                await self._move(TaskEvent.COMPLETION_WON, cancel_outcome=TOO_LATE)
            else:
                await self._move(TaskEvent.PROVIDER_SUCCEEDED)
            return final
        await self._end(ending, error=error, payload={"provider_status": final.raw_status, "job_id": job.job_id})

    async def _stop_live(self, job: JobRef, *, person: bool = True) -> PollResult:
        """Cancel `job` and follow it until the provider says it ended (or a person steps in). Without
        `person` (a task taken over: nobody can be asked) the cancel is asked again after a quiet
        round, status calls spaced out, until the job ends: its reservation stays held meanwhile."""
        first_s = max(self._info.min_poll_interval_s, 2.0)
        while True:
            state = await self._cancel_job(job, person=person)
            stop_by, pace = workflow.now() + STOP_GRACE, first_s
            while not state.terminal and workflow.now() < stop_by:
                await self._pause(pace, wake_on_cancel=False)
                state = await self._poll(job, ask_on_refusal=False) or state
                pace = pace if person else min(pace * 2, MAX_POLL_INTERVAL_S)
            if state.terminal:
                return state
            if person:
                await self._attention("cancel", f"job {job.job_id} still {state.raw_status} after the cancel call")
            else:
                await self._pause(STOP_GRACE.total_seconds(), wake_on_cancel=False)

    async def _cancel_job(self, job: JobRef, *, person: bool = True) -> PollResult:
        while True:
            try:
                state = await self._run(PollActivities.cancel_job, job)
            except ActivityError as exc:
                if person:
                    await self._attention("cancel", f"cannot cancel job {job.job_id}: {describe(exc)}")
                else:
                    await self._pause(OUTAGE_PAUSE_S, wake_on_cancel=False)
                continue
            await self._observe(job, state)
            return state
