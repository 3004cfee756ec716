"""NEEDS_ATTENTION: the evidence recorded, the slot held only while a job may run, and an operator's
`resolve` decision carried out."""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.submit import SubmitActivities
    from contracts.messages import AttemptRef, ResolveAction, ResolveRequest
    from contracts.task import TaskEvent

from workflows.generation.patches import ADMISSION_BOUNDED, ATTENTION_TAKES_CANCEL, FAIL_STOPS_JOB, RISK_HELD
from workflows.generation.state import RunState
from workflows.generation.steps import decision_payload
from workflows.generation.strays import STRAY

# The stuck step a NEEDS_ATTENTION task resumes with on `resolve --retry`, and the event for it.
RESUME_EVENT = {"poll": TaskEvent.PROVIDER_RUNNING, "reconcile": TaskEvent.SUBMIT_AMBIGUOUS,
                "cancel": TaskEvent.CANCEL_REQUESTED}


class Attention(RunState):
    """NEEDS_ATTENTION: a person decides (`resolve`), the slot held only while a job may run meanwhile;
    the decision (retry, fail, accept the duplicate risk) carried out."""

    async def _attention(self, stuck: str, evidence: str | None, **more: Any) -> ResolveRequest:
        """NEEDS_ATTENTION with the evidence; wait for an operator's decision and carry it out
        (a retry returns here for the caller to run its step again; a decision on strays is the
        caller's to carry out)."""
        self._stuck = stuck
        self._tell("waiting_for_person", f"needs attention (stuck at {stuck}): {evidence}; decide with "
                                         f"`reelqueue resolve {self._task_id}`", waiting_for=evidence or stuck)
        await self._move(TaskEvent.NEEDS_ATTENTION, error=evidence, error_class="needs_attention",
                         payload={"stuck": stuck, "evidence": evidence,
                                  "job_id": self._live.job_id if self._live else None,
                                  "unknown_attempt": self._unknown.attempt_no if self._unknown else None, **more})
        takes_cancel = stuck == "poll" and self._live is not None and self._patched(ATTENTION_TAKES_CANCEL)
        released = await self._wait_for_decision(takes_cancel=takes_cancel)
        if self._resolution is None:  # a cancel came: the job is followed again, and the cancel stops it
            self._stuck = None
            await self._move(RESUME_EVENT[stuck], payload={"cancel": self._cancel.reason,
                                                           "by": self._cancel.requested_by})
            return ResolveRequest(action=ResolveAction.RETRY, by=self._cancel.requested_by, reason="cancel requested")
        decision, self._stuck = self._resolution, None
        if stuck == STRAY:
            self._resolution = None
            return decision
        decided = decision_payload(decision)
        try:
            if decision.action is ResolveAction.FAIL:
                # A job that can still be cancelled is, by `_end` (a cancel that cannot be made comes back
                # here, stuck at cancel, and the same decision abandons it)
                stops = stuck != "cancel" and self._live is not None and self._patched(FAIL_STOPS_JOB)
                await self._abandon_open_attempts(keep_live=stops)
                await self._end(TaskEvent.FINAL_FAILURE, error=f"failed by {decision.by}: {decision.reason}",
                                error_class="operator", payload=decided)
            if decision.action is ResolveAction.ACCEPT_DUPLICATE_RISK:
                await self._book_the_risk(decided)
                await self._abandon_open_attempts()
                await self._move(TaskEvent.ATTENTION_RESOLVED, payload=decided)
            else:
                await self._move(RESUME_EVENT[stuck], payload=decided)
        finally:
            self._resolution = None
        if released and decision.action is ResolveAction.RETRY:
            await self._await_slot(None, reask=True)  # the step runs again under a slot (or a cancel came)
        return decision

    async def _book_the_risk(self, decided: dict) -> None:
        """The unknown attempt may have made a job that bills: its estimate is held (a RESERVE naming
        it) while the task goes on, so the tenant's credit counts both jobs (duplicate-risk-held-v1).
        Without the credit for it nothing is sent again: the task fails, the attempt abandoned."""
        risked = self._unknown
        if risked is None or not self._patched(RISK_HELD):
            return
        decided["risk_held_for_attempt"] = risked.attempt_no
        if not await self._hold_for(risked.attempt_no, "risk"):
            await self._abandon_open_attempts()
            await self._end(TaskEvent.FINAL_FAILURE, error="no credit to hold the accepted duplicate risk of attempt "
                            f"{risked.attempt_no} beside a new attempt", error_class="credit", payload=decided)

    async def _wait_for_decision(self, *, takes_cancel: bool = False) -> bool:
        """Wait for the operator, holding the slot only while a job of this task may be running at the
        provider; True if the slot was given back meanwhile. With `takes_cancel` (a live job this run
        can stop) a cancel ends the wait too."""
        hold = self._slot_hold() if self._patched(ADMISSION_BOUNDED) else None
        if self._slot is not None and hold is not None:
            if hold:
                with contextlib.suppress(TimeoutError):
                    await workflow.wait_condition(lambda: self._resolution is not None, timeout=hold)
            if self._resolution is None:
                await self._release_slot()
                await workflow.wait_condition(lambda: self._resolution is not None)
                return True
        await workflow.wait_condition(lambda: self._resolution is not None or (takes_cancel and self._cancel_pending()))
        return False

    def _slot_hold(self) -> timedelta | None:
        """How long a task waiting for a person keeps its slot; None: until the person decides.
        A followed job (stuck at poll or cancel) is alive at the provider: kept. An unknown submit
        may have created a job we cannot see or stop; such a job ends at the provider on its own,
        so the slot is kept for one job deadline and then given back. Otherwise nothing runs."""
        if self._live is not None:
            return None
        if self._unknown is not None:
            return timedelta(seconds=self._info.deadline_s)
        return timedelta(0)

    async def _abandon_open_attempts(self, *, keep_live: bool = False) -> None:
        for ref in (self._unknown, None if keep_live else self._live):
            if ref is not None:
                await self._run(SubmitActivities.abandon_attempt,
                                AttemptRef(task_id=ref.task_id, attempt_no=ref.attempt_no))
        self._unknown = None
        if not keep_live:
            self._live = None
