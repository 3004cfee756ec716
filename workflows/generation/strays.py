"""Strays: duplicate provider jobs, each cancelled and costed before the ledger closes; the ones the
provider refuses to answer for wait for a person."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.errors import BUSINESS_FAILURES
    from activities.poll import PollActivities
    from contracts.messages import AttemptRef, ResolveAction, ResolveRequest, StrayCostAcceptance, StrayJobRef, TaskRef
    from contracts.task import TaskEvent, TaskStatus
    from schema.state_machine import TERMINAL

from workflows.generation.patches import STRAYS
from workflows.generation.state import RunState
from workflows.generation.steps import decision_payload, describe, error_type

STRAY = "stray"  # the stuck step of a task held up by duplicate jobs the provider refuses to answer for
# Endings of a task whose paid video waits in POST_PROCESSING for them.
DELIVERED = frozenset({TaskEvent.PLAYABLE_ASSET_READY, TaskEvent.REVIEW_REQUIRED})


class Strays(RunState):
    """Every duplicate job of the task accounted before its ledger closes: started in the background when
    found, the rest read from the database at the end; the ones the provider refuses go to a person."""

    def _account_strays(self, ref: AttemptRef, job_ids: list[str]) -> None:
        """Cancel and cost each duplicate job in the background; the task ends only after."""
        for job_id in job_ids:
            stray = StrayJobRef(task_id=ref.task_id, attempt_no=ref.attempt_no, job_id=job_id)
            accounting = (self._account_stray(stray) if self._patched(STRAYS)
                          else self._run(PollActivities.account_stray_job, stray))
            self._strays.append(asyncio.create_task(accounting))

    async def _settle_strays(self, ending: TaskEvent) -> TaskEvent:
        """Every duplicate job of the task accounted before its ledger closes: the ones this run
        found, then any other the database holds unaccounted (a late submit answer, a reconcile
        whose answer was lost). Jobs the provider refuses to answer for wait for a person: retry,
        accept their cost as unknown (the task's estimate each), or fail the task (the same
        booking first); the task then ends as it was going to. A task taken over, or deciding in
        REVIEW (its reservation already closed), has nothing to hold: the workflow books them."""
        before = self._status
        while True:
            refused = await self._account_every_stray()
            if not refused:
                return ending
            evidence = "; ".join(why for _, why in refused)
            if before in TERMINAL or before is TaskStatus.REVIEW:  # nothing held to wait with: book the estimate
                why = "task ended outside this workflow" if before in TERMINAL else "found after review"
                await self._accept_strays(refused, ResolveRequest(
                    action=ResolveAction.ACCEPT_DUPLICATE_RISK, by="workflow", reason=f"{why}; {evidence}"))
                continue
            decision = await self._attention(STRAY, evidence, strays=[job.job_id for job, _ in refused])
            if decision.action is not ResolveAction.RETRY:
                await self._accept_strays(refused, decision)
            if decision.action is ResolveAction.FAIL:
                await self._end(TaskEvent.FINAL_FAILURE, error=f"failed by {decision.by}: {decision.reason}",
                                error_class="operator", payload=decision_payload(decision))
            ending = await self._return_to(ending, decision)

    async def _account_every_stray(self) -> list[tuple[StrayJobRef, str]]:
        """Wait for the strays this run is accounting, then account those the database still holds;
        the ones the provider refused, with why."""
        results = await asyncio.gather(*self._strays)
        self._strays = []
        refused = [r for r in results if r is not None]
        skip = {job.job_id for job, _ in refused}
        pending = await workflow.execute_local_activity_method(  # one short read at every task's end: local
            PollActivities.unaccounted_strays, TaskRef(task_id=self._task_id, run=self._run_no),
            start_to_close_timeout=timedelta(seconds=15),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=30)))
        more = await asyncio.gather(*(self._account_stray(job) for job in pending if job.job_id not in skip))
        return refused + [r for r in more if r is not None]

    async def _account_stray(self, stray: StrayJobRef) -> tuple[StrayJobRef, str] | None:
        """Cancel and cost one duplicate job; the provider's refusal to answer for it, if it refuses."""
        try:
            await self._run(PollActivities.account_stray_job, stray)
        except ActivityError as exc:
            if error_type(exc) not in BUSINESS_FAILURES:
                raise
            return stray, f"duplicate job {stray.job_id}: {describe(exc)}"
        return None

    async def _accept_strays(self, refused: list[tuple[StrayJobRef, str]], decision: ResolveRequest) -> None:
        for stray, _ in refused:
            await self._run(PollActivities.accept_stray_cost,
                            StrayCostAcceptance(stray=stray, by=decision.by, reason=decision.reason))

    async def _return_to(self, ending: TaskEvent, decision: ResolveRequest) -> TaskEvent:
        """Out of NEEDS_ATTENTION after a decision on strays, to where `ending` applies: a paid video
        back to POST_PROCESSING (and on, maybe into REVIEW), a cancel back through
        CANCEL_REQUESTED; any other ending is a failure, which ends from NEEDS_ATTENTION itself."""
        decided = decision_payload(decision)
        if ending in DELIVERED:
            await self._move(TaskEvent.STRAYS_DECIDED, payload=decided)
            return ending
        if ending in (TaskEvent.CANCEL_REQUESTED, TaskEvent.CANCEL_CONFIRMED):
            await self._move(TaskEvent.CANCEL_REQUESTED, payload=decided)
            return TaskEvent.CANCEL_CONFIRMED
        return ending if ending in (TaskEvent.FINAL_FAILURE, TaskEvent.DEADLINE_PASSED) else TaskEvent.FINAL_FAILURE
