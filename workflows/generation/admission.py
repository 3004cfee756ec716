"""Admission: when a task may submit. The tenant's slot and the model's, held while the task generates,
then for each attempt the provider gate's slot (asked, waited for, renewed, given back) and the platform's
with it, and a paused import's wait holding nothing. Every task takes its layers in the same order
(tenant, model, provider, platform), so no two tasks wait for each other (docs/architecture.md, "Admission")."""

from __future__ import annotations

import contextlib
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.admission import AdmissionActivities
    from contracts import workflow_api as api
    from contracts.admission import AdmissionInput, PlanLimits, SlotGrant, SlotRelease, SlotRenewal, SlotRequest
    from contracts.messages import JobRef
    from contracts.task import TaskEvent

from workflows.generation.patches import (
    ADMISSION,
    ADMISSION_BOUNDED,
    ADMISSION_LAYERS,
    BREAKER,
    GRANT_AT_ONCE,
    IMPORT_PAUSE,
    LONG_WAIT_SPACING,
    PAUSE_HOLDS_NOTHING,
    RELEASE_IN_STEP,
    RENEW_IN_SUBMIT,
    TENANT_ADMISSION,
)
from workflows.generation.state import RunState
from workflows.generation.steps import (
    LONG_LOOK_EVERY,
    LONG_REASK_EVERY,
    LONG_WAIT,
    REASK_EVERY,
    RENEW_EVERY,
    REROUTE_EVERY,
)


class Admission(RunState):
    """When a task may submit: `_take_tenant_slot` / `_give_tenant_slot` around its attempts, `_admit`
    before each submit (the provider gate's slot, asked again while waiting, bounded by the task deadline;
    a paused import's task waits holding nothing), and the held slot's renewals, failure reports and release."""

    async def _admit(self) -> bool:
        """Wait, QUEUED, until the provider's gate grants a slot (oldest first); False when a cancel
        came first. Waiting is a blocked workflow: it costs nothing however many tasks wait. The task
        deadline bounds the wait (the task ends EXPIRED and leaves the queue)."""
        if self._slot is not None or not self._patched(ADMISSION):
            return True
        bounded = self._patched(ADMISSION_BOUNDED)
        granted = await self._await_slot(self._task_deadline if bounded else None, reask=bounded)
        if granted is None and self._rerouted:
            return False  # it left the line for another route: the next attempt chooses it
        if granted is None and not self._cancel_pending():
            await self._end(TaskEvent.DEADLINE_PASSED, error="the task's deadline passed while it waited for a slot")
        if granted is not None and not await self._take_platform_slot():
            await self._release_slot()  # the provider's too: a pause or a cancel holds nothing, a deadline ends
            if not self._cancel_pending() and not self._paused():
                await self._end(TaskEvent.DEADLINE_PASSED,
                                error="the task's deadline passed while it waited for the platform's slot")
            return False
        return granted is not None

    async def _await_slot(self, until: datetime | None, *, reask: bool) -> SlotGrant | None:
        """Ask the gate and wait for its grant; None when a cancel came first or `until` passed (the
        request is then withdrawn). With `reask`, the request is sent again every REASK_EVERY with its
        first `requested_at`: a gate that still has it ignores it, a gate that lost it (reset,
        terminated) puts it back in its place in line."""
        self._asked_at = self._asked_at or workflow.now()
        self._waiting_since = self._waiting_since or workflow.now()
        request = self._slot_request(self._asked_at)
        while True:
            if self._paused() and not await self._wait_paused_holding_nothing(until):
                return None
            self._granted = None
            self._tell("waiting_for_slot", f"waiting for a slot at provider {self._info.provider} (in line since "
                                           f"{self._asked_at:%Y-%m-%d %H:%M:%S} UTC)")
            await self._request_slot(request)
            at_once = self._patched(GRANT_AT_ONCE)
            if self._granted is None or not at_once:
                await self._wait_for_grant(request, until, reask=reask)
            # grant-at-once-v1: a slot in the answer to an ask sent before a pause came is given back too
            kept = self._granted if at_once and self._paused() and not self._cancel_pending() else None
            if (self._granted is not None and kept is None) or not self._paused() or self._cancel_pending():
                break
            # Paused while in line: leave it (no grant comes while paused); the next ask keeps the place.
            await self._signal_gate(api.SIGNAL_GATE_RELEASE, SlotRelease(
                workflow_id=request.workflow_id, token=kept.token if kept is not None else None))
        if self._granted is None:
            await self._signal_gate(api.SIGNAL_GATE_RELEASE, SlotRelease(workflow_id=request.workflow_id))
            return None
        self._slot, self._renewed_at = self._granted, workflow.now()
        self._waiting_since, self._long_waiting = None, False
        return self._slot

    async def _wait_for_grant(self, request: SlotRequest, until: datetime | None, *, reask: bool) -> None:
        """Until the gate grants, a cancel comes, `until` passes or (import-pause-v1) the import is paused."""
        self._asked_gate_at = workflow.now()
        while True:
            # spread: tasks queued together re-ask apart; one with fallback routes looks at them more often
            # (route-look-v1: as often as its looks find it worth it, `Routing._cheap_looks`)
            routable = self._routable()
            every = self._look_every if routable and self._cheap_looks() else REROUTE_EVERY if routable else REASK_EVERY
            if self._long_wait():
                every = max(every, LONG_LOOK_EVERY if routable else LONG_REASK_EVERY)
            every *= workflow.random().uniform(0.8, 1.2)
            wait = None if not reask else every if until is None else min(every, until - workflow.now())
            try:
                await workflow.wait_condition(
                    lambda: self._granted is not None or self._cancel_pending() or self._paused_by is not None
                    or self._recheck, timeout=wait if wait is None else max(wait, timedelta(seconds=1)))
                if not self._recheck:
                    return
                self._recheck = False  # stale-grant-v1: the gate's answer says whether that slot is ours
                await self._request_slot(request)
                if self._granted is not None:
                    return
            except TimeoutError:
                if until is not None and workflow.now() >= until:
                    return
                if self._routable() and await self._route_elsewhere():
                    return
                reask_every = LONG_REASK_EVERY if self._long_waiting else REASK_EVERY
                if self._look_every is not None and workflow.now() - self._asked_gate_at < reask_every * 0.8:
                    continue  # route-look-v1: a look is not a reason to ask the gate again
                self._asked_gate_at = workflow.now()
                if not await self._signal_gate(api.SIGNAL_GATE_REQUEST, request):
                    await self._request_slot(request)  # no gate runs: bring one up

    def _long_wait(self) -> bool:
        """The task has waited LONG_WAIT for a provider's slot (long-wait-spacing-v1, asked once it has: the
        marker is in long waiters' histories alone): its looks and re-asks space out, so the history of a
        wait as long as the task's deadline allows stays a bounded size (docs/architecture.md, "Long waits")."""
        if not self._long_waiting and self._waiting_since is not None \
                and workflow.now() - self._waiting_since >= LONG_WAIT:
            self._long_waiting = self._patched(LONG_WAIT_SPACING)
        return self._long_waiting

    def _paused(self) -> bool:
        """The task's import is paused (import-pause-v1; runs from before the patch are never paused)."""
        return self._paused_by is not None and self._patched(IMPORT_PAUSE)

    def _pause_holds_nothing(self) -> bool:
        """Paused, on a run that holds no slot of any layer while paused (pause-holds-nothing-v1, asked
        only once a pause came: the patch's marker is in paused tasks' histories alone)."""
        return self._paused() and self._patched(PAUSE_HOLDS_NOTHING)

    async def _wait_paused_holding_nothing(self, until: datetime | None) -> bool:
        """Wait while paused, the tenant's slot given back meanwhile and asked for again after
        (pause-holds-nothing-v1); False when a cancel came or `until` passed."""
        holds = self._tenant_slot is not None or any(g != api.PLATFORM_GATE for g in self._layer_slots)
        gives_back = holds and self._pause_holds_nothing()
        if gives_back:
            await self._give_task_slots()
        if not await self._wait_while_paused(until):
            return False
        if gives_back:
            await self._take_task_slots()
        return True

    async def _wait_while_paused(self, until: datetime | None) -> bool:
        """A paused import's task waits here holding no slot; False when a cancel came or `until` passed."""
        self._tell("paused", f"import paused by {self._paused_by}: waits for `reelqueue resume`, holding no slot",
                   waiting_for=f"paused by {self._paused_by}")
        timeout = None if until is None else max(until - workflow.now(), timedelta(seconds=1))
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(lambda: self._paused_by is None or self._cancel_pending(), timeout=timeout)
        return self._paused_by is None and not self._cancel_pending()

    def _slot_request(self, asked_at: datetime) -> SlotRequest:
        """This task's request at a gate: its place kept by its first ask there, its line by its priority class."""
        return SlotRequest(workflow_id=workflow.info().workflow_id, task_id=self._task_id,
                           requested_at=asked_at, priority=self._info.priority)

    async def _take_task_slots(self) -> None:
        """The slots held while the task generates: its tenant's, then its model's (admission-layers-v1)."""
        await self._take_tenant_slot()
        await self._take_model_slot()

    async def _swap_model_slot(self, old: tuple[str, int, str] | None) -> None:
        """The route changed (route-fallback-v1): the old model's slot given back, the new one's taken; the
        tenant's is kept. The task holds no provider's slot here, so the layers' order still holds."""
        if old is not None:
            await self._give_layer_slot(old[0])
        await self._take_model_slot()

    async def _take_model_slot(self) -> None:
        """The slot of the task's model (its layer); a task that cannot have it gives its tenant's back
        as it ends."""
        layer = self._model_layer()
        if layer is None or layer[0] in self._layer_slots or await self._take_layer_slot(*layer, leave_on_pause=False):
            return
        await self._give_tenant_slot()
        if self._cancel_pending():
            await self._end(TaskEvent.CANCEL_REQUESTED, payload=self._cancel_payload())
        await self._end(TaskEvent.DEADLINE_PASSED,
                        error="the task's deadline passed while it waited for its model's slot")

    async def _give_task_slots(self) -> None:
        """The model's slot, then the tenant's: given back together once the task stops generating."""
        for gate in [g for g in self._layer_slots if g != api.PLATFORM_GATE]:
            await self._give_layer_slot(gate)
        await self._give_tenant_slot()

    def _model_layer(self) -> tuple[str, int, str] | None:
        """The gate, limit and grant signal of the task's model's layer; None when its model has no limit."""
        limit = self._info.model_max_concurrent
        if limit is None or not self._patched(ADMISSION_LAYERS):
            return None
        return api.model_gate(self._info.provider, self._info.model), limit, api.SIGNAL_MODEL_SLOT_GRANTED

    async def _take_platform_slot(self) -> bool:
        """One of the platform's slots, asked once the provider's is held (admission-layers-v1): a task
        waits here only while the platform is full, so the provider's slots it holds meanwhile are
        ones the platform could not have used. False when a cancel, a pause or the deadline came first."""
        limit = self._info.platform_max_concurrent
        if limit is None or api.PLATFORM_GATE in self._layer_slots or not self._patched(ADMISSION_LAYERS):
            return True
        return await self._take_layer_slot(api.PLATFORM_GATE, limit, api.SIGNAL_PLATFORM_SLOT_GRANTED,
                                           leave_on_pause=True)

    async def _take_layer_slot(self, gate: str, limit: int, signal: str, *, leave_on_pause: bool) -> bool:
        """Wait, QUEUED, for one of a layer gate's slots (its place kept by its first ask); False, the
        request withdrawn and a grant given back, when a cancel, the task deadline or (`leave_on_pause`)
        a pause came first."""
        self._layer_asked_at.setdefault(gate, workflow.now())
        request = self._slot_request(self._layer_asked_at[gate])
        self._layer_granted[gate] = None
        self._tell("waiting_for_slot", f"waiting for one of the {limit} slots of {gate}")
        ask = AdmissionInput(provider=gate, request=request, plan_limits=PlanLimits(max_concurrent=limit),
                             grant_signal=signal, at_once=True)
        granted = await self._run(AdmissionActivities.request_slot, ask)
        if granted is not None:
            self._layer_granted[gate] = granted

        def stop() -> bool:
            return self._cancel_pending() or (leave_on_pause and self._paused())

        while self._layer_granted[gate] is None and not stop():
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(lambda: self._layer_granted[gate] is not None or stop()
                                              or gate in self._layer_recheck,
                                              timeout=max(self._task_deadline - workflow.now(), timedelta(seconds=1)))
            if gate not in self._layer_recheck:
                break
            self._layer_recheck.discard(gate)  # stale-layer-recheck-v1: the gate's answer says whether it is ours
            granted = await self._run(AdmissionActivities.request_slot, ask)
            if granted is not None:
                self._layer_granted[gate] = granted
        grant = self._layer_granted.pop(gate)
        if grant is not None and not stop():
            self._layer_slots[gate] = grant
            return True
        if grant is not None:
            self._layer_given_back[gate] = grant.token
        await self._signal_gate(api.SIGNAL_GATE_RELEASE, SlotRelease(
            workflow_id=request.workflow_id, token=grant.token if grant is not None else None), provider=gate)
        return False

    async def _give_layer_slot(self, gate: str) -> None:
        grant = self._layer_slots.pop(gate, None)
        if grant is not None:
            self._layer_given_back[gate] = grant.token
            await self._signal_gate(api.SIGNAL_GATE_RELEASE, SlotRelease(
                workflow_id=workflow.info().workflow_id, token=grant.token), provider=gate)

    async def _take_tenant_slot(self) -> None:
        """Wait, QUEUED, for one of the tenant's slots (its max_concurrent) before the provider's
        gate is asked; the task deadline bounds the wait and a cancel ends it (request withdrawn). A
        paused task waits before it asks, and a pause that finds it in line (or just granted) takes it
        out, keeping its first place for its next ask (pause-holds-nothing-v1)."""
        limit = self._info.tenant_max_concurrent
        if limit is None or self._tenant_slot is not None or not self._patched(TENANT_ADMISSION):
            return
        gate = api.tenant_gate(self._info.tenant_id)
        self._tenant_asked_at = self._tenant_asked_at or workflow.now()
        request = self._slot_request(self._tenant_asked_at)
        at_once = self._patched(GRANT_AT_ONCE)
        self._tenant_granted = None
        while not self._pause_holds_nothing() or await self._wait_while_paused(self._task_deadline):
            self._tenant_granted = None
            self._tell("waiting_for_slot", f"waiting for one of tenant {self._info.tenant_id}'s {limit} slots")
            granted = await self._run(AdmissionActivities.request_slot, AdmissionInput(
                provider=gate, request=request, plan_limits=PlanLimits(max_concurrent=limit),
                grant_signal=api.SIGNAL_TENANT_SLOT_GRANTED, at_once=at_once))
            if granted is not None:
                self._tenant_granted = granted
            if self._tenant_granted is None or not at_once:
                with contextlib.suppress(TimeoutError):
                    await workflow.wait_condition(
                        lambda: self._tenant_granted is not None or self._cancel_pending()
                        or (self._paused_by is not None and self._pause_holds_nothing()),
                        timeout=max(self._task_deadline - workflow.now(), timedelta(seconds=1)))
            if self._cancel_pending() or not (self._paused_by is not None and self._pause_holds_nothing()):
                break
            kept = self._tenant_granted  # paused: out of the line, a slot just granted given back
            self._tenant_granted = None
            if kept is not None:
                self._tenant_given_back = kept.token
            await self._signal_gate(api.SIGNAL_GATE_RELEASE, SlotRelease(
                workflow_id=request.workflow_id, token=kept.token if kept is not None else None), provider=gate)
        if self._tenant_granted is None:
            await self._signal_gate(api.SIGNAL_GATE_RELEASE, SlotRelease(workflow_id=request.workflow_id),
                                    provider=gate)
            if self._cancel_pending():
                await self._end(TaskEvent.CANCEL_REQUESTED, payload=self._cancel_payload())
            await self._end(TaskEvent.DEADLINE_PASSED,
                            error="the task's deadline passed while it waited for its tenant's slot")
        self._tenant_slot = self._tenant_granted

    async def _give_tenant_slot(self) -> None:
        if self._tenant_slot is None:
            return
        release = SlotRelease(workflow_id=workflow.info().workflow_id, token=self._tenant_slot.token)
        self._tenant_given_back, self._tenant_slot = self._tenant_slot.token, None
        await self._signal_gate(api.SIGNAL_GATE_RELEASE, release, provider=api.tenant_gate(self._info.tenant_id))

    async def _request_slot(self, request: SlotRequest) -> None:
        """Ask the provider's gate; with grant-at-once-v1 its answer may be the slot itself."""
        granted = await self._run(AdmissionActivities.request_slot, AdmissionInput(
            provider=self._info.provider, request=request, plan_limits=self._info.plan_limits,
            at_once=self._patched(GRANT_AT_ONCE)))
        if granted is not None:
            self._granted = granted

    async def _renew_slot(self, *, accepted: bool = False) -> None:
        if self._slot is None or not (accepted or workflow.now() - self._renewed_at >= RENEW_EVERY):
            return
        self._renewed_at = workflow.now()
        await self._signal_gate(api.SIGNAL_GATE_RENEW, SlotRenewal(
            workflow_id=workflow.info().workflow_id, token=self._slot.token, accepted=accepted))

    def _renewal_on_acceptance(self) -> dict[str, Any]:
        """What the submit step sends the gate once the provider accepted (renew-in-submit-v1)."""
        if self._slot is None or not self._patched(RENEW_IN_SUBMIT):
            return {}
        return {"gate_id": api.gate_id(self._info.provider, workflow.info().task_queue), "renewal": SlotRenewal(
            workflow_id=workflow.info().workflow_id, token=self._slot.token, accepted=True)}

    async def _report_failure(self, failure: str | None) -> None:
        """Tell the gate that the submit under the slot still held (its outcome unknown) failed."""
        if failure is None or self._slot is None or not self._patched(BREAKER):
            return
        await self._signal_gate(api.SIGNAL_GATE_RENEW, SlotRenewal(
            workflow_id=workflow.info().workflow_id, token=self._slot.token, failure=failure))

    async def _release_slot(self, *, throttled: bool = False, retry_after_s: float | None = None,
                            failure: str | None = None, given: bool = False) -> None:
        """The provider's slot given back, and the platform's taken with it (admission-layers-v1); `given`:
        the step that saw the job end gave the provider's back already (release-in-step-v1)."""
        await self._give_layer_slot(api.PLATFORM_GATE)
        if self._slot is None:
            return
        release = SlotRelease(workflow_id=workflow.info().workflow_id, token=self._slot.token, throttled=throttled,
                              retry_after_s=retry_after_s, failure=failure)
        self._given_back, self._slot = self._slot.token, None
        if not given:
            await self._signal_gate(api.SIGNAL_GATE_RELEASE, release)

    def _release_on_end(self, job: JobRef) -> dict[str, Any]:
        """What a status call of the live job sends the gate if it sees the job end (release-in-step-v1)."""
        live = self._live is not None and self._live.job_id == job.job_id
        if not live or self._slot is None or not self._patched(RELEASE_IN_STEP):
            return {}
        return {"gate_id": api.gate_id(self._info.provider, workflow.info().task_queue), "release": SlotRelease(
            workflow_id=workflow.info().workflow_id, token=self._slot.token)}

    async def _signal_gate(self, signal: str, message: object, *, provider: str | None = None) -> bool:
        """Tell the provider's gate (or another, e.g. the tenant's); False when no gate runs. A gate
        that is gone (terminated by hand) holds nothing to give back, and the next request starts a new one."""
        gate = api.gate_id(provider or self._info.provider, workflow.info().task_queue)
        try:
            await workflow.get_external_workflow_handle(gate).signal(signal, message)
        except ApplicationError as exc:
            workflow.logger.warning("gate %s did not take %s: %s", gate, signal, exc)
            return False
        return True
