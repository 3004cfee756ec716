"""Review: automatic checks, then REVIEW until a person (or the plan's deadline) decides; a
regenerate runs a new paid attempt."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.review import ReviewActivities
    from contracts.messages import (
        AssetRef,
        CheckInput,
        CheckOutcome,
        CheckResult,
        ReviewAction,
        ReviewPolicy,
        ReviewRequest,
    )
    from contracts.task import TaskEvent

from workflows.generation.patches import CHECKS_GATE, DECISION_WINS, JOB_DEADLINE, LATE_CANCEL_DELIVERS, REVIEW
from workflows.generation.state import RunState
from workflows.generation.steps import MAX_PAID_ATTEMPTS

REVIEW_DEADLINE_BY = "review-deadline"  # who approved when the plan's review deadline approves


class Review(RunState):
    """The review step when the plan asks for one, and a reviewer's decision: approve and reject end
    the task, regenerate runs a new paid attempt."""

    def _checks_policy(self) -> ReviewPolicy | None:
        """The checks the task's video gets: its review's, or (checks-gate-success-v1) those that gate
        success for a template without review; None for none."""
        policy = self._info.review
        if policy is None and self._info.checks is not None and self._cancel is None:
            policy = self._info.checks if self._patched(CHECKS_GATE) else None  # success needs the checks passed
        return policy

    async def _review(self, proxy: AssetRef, made: CheckResult | None = None) -> None:
        """Checks (`made`: those the media step ran, lean-path-v1), then REVIEW until a person decides,
        when the plan asks for it; returns when it does not. The provider already charged, so the credit
        is settled on entering REVIEW; a regenerate runs a new paid attempt and comes back here with its video."""
        policy = self._checks_policy()
        gate = policy is not None and self._info.review is None
        if policy is None or not self._patched(REVIEW):
            return
        if self._cancel is not None and self._patched(LATE_CANCEL_DELIVERS):
            return  # a cancel that came while the paid video was delivered is too late (completion wins)
        self._tell("checking", "automatic checks of the video (black, frozen, duration, audio)")
        checks = made or await self._run(ReviewActivities.check_output, CheckInput(
            task_id=self._task_id, attempt_no=self._attempt_no, proxy_asset_id=proxy.asset_id,
            aspect_ratio=self._info.aspect_ratio, duration_s=self._info.duration_s, policy=policy))
        if not policy.required and checks.passed:
            return
        if gate:
            await self._checks_failed(proxy, [c for c in checks.checks if not c.passed])
        await self._close_ledger(TaskEvent.REVIEW_REQUIRED)
        self._booked = self._cost()
        await self._move(TaskEvent.REVIEW_REQUIRED, payload={
            "proxy": proxy.key, "checks_passed": checks.passed,
            "failed_checks": [c.name for c in checks.checks if not c.passed]})
        self._in_review = True
        self._tell("waiting_for_person", f"in review: waiting for a reviewer's decision (deadline in "
                                         f"{policy.deadline_s / 3600:g} h, then {policy.on_deadline})",
                   waiting_for="review decision" + ("" if checks.passed else " (automatic checks failed)"))
        try:
            await workflow.wait_condition(lambda: self._decision is not None or self._cancel_pending(),
                                          timeout=timedelta(seconds=policy.deadline_s))
        except TimeoutError:
            # A decision accepted in the same activation as the deadline's timer wins: the reviewer
            # was told it was taken, and its update must complete (runs from before ignored it).
            if self._decision is None or not self._patched(DECISION_WINS):
                self._in_review = False
                if policy.on_deadline == "approve":
                    await self._end(TaskEvent.REVIEW_APPROVED, payload={"decision": "approve", "by": REVIEW_DEADLINE_BY,
                                                                "reason": "review deadline passed"})
                await self._end(TaskEvent.DEADLINE_PASSED, error="no review decision before the review deadline",
                                error_class="review_deadline")
        self._in_review = False
        if self._decision is None:  # a cancel: the video exists and is paid for, nothing to stop
            await self._move(TaskEvent.CANCEL_REQUESTED, payload=self._cancel_payload())
            await self._end(TaskEvent.CANCEL_CONFIRMED)
        await self._decide(self._decision)
        # A new production window: the review wait does not count against the new attempt's deadlines
        # (`_track` restarts the job's deadline at its submit; older runs restart it here).
        if not self._patched(JOB_DEADLINE):
            self._deadline = workflow.now() + timedelta(seconds=self._info.deadline_s)
        self._task_deadline = max(self._task_deadline, workflow.now() + timedelta(seconds=self._info.task_deadline_s))
        await self._deliver(await self._generate())

    async def _checks_failed(self, proxy: AssetRef, failed: list[CheckOutcome]) -> None:
        """A template without review whose video failed a check: one new paid attempt while the budget
        and the tenant's credit allow (its estimate held beside the reservation, both closed when the task
        settles), then FAILED_FINAL naming the checks when the plan says so; returns for REVIEW otherwise."""
        named = {"proxy": proxy.key, "failed_checks": [c.name for c in failed],
                 "details": {c.name: c.detail for c in failed}}
        if not self._checks_regenerated and self._paid < MAX_PAID_ATTEMPTS:
            self._checks_regenerated = True
            if await self._hold_for(self._attempt_no + 1):
                await self._move(TaskEvent.CHECKS_FAILED, payload=named)
                await self._deliver(await self._generate())
            named["no_regeneration"] = "the tenant's credit does not cover another attempt"
        if self._info.checks.on_failed_checks == "fail":
            await self._end(TaskEvent.FINAL_FAILURE, error="automatic checks failed: " + "; ".join(
                f"{c.name} ({c.detail})" for c in failed), error_class="checks", payload=named)

    async def _decide(self, decision: ReviewRequest) -> None:
        """Record the reviewer's decision (a state event naming them); approve and reject end the task."""
        payload = {"decision": decision.action.value, "by": decision.by, "reason": decision.reason}
        try:
            if decision.action is ReviewAction.APPROVE:
                await self._end(TaskEvent.REVIEW_APPROVED, payload=payload)
            if decision.action is ReviewAction.REJECT:
                await self._end(TaskEvent.REVIEW_REJECTED, error=f"rejected by {decision.by}: {decision.reason}",
                                error_class="review", payload=payload)
            await self._move(TaskEvent.REVIEW_REGENERATE, payload={**payload, "prompt": decision.prompt},
                             prompt_override=decision.prompt)
        finally:
            self._decision = None
