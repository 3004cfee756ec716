"""Ask a provider's gate (workflows/provider_gate.py) for a slot, starting the gate if needed.

Signal-with-start, so the first task of a provider brings its gate up; the limits (configuration
merged with the task's plan) and the breaker's policy travel with every ask, so a changed limit
reaches a running gate with the next request.
"""

from __future__ import annotations

import asyncio
import logging

from temporalio import activity
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError

from activities.errors import classified_async
from config.defaults import BreakerPolicy, ProviderLimits
from contracts import workflow_api as api
from contracts.admission import (
    AdmissionInput,
    GateInput,
    SlotGrant,
    SlotRelease,
    SlotRenewal,
    SlotRequest,
    effective_limits,
)

NOTICE_TIMEOUT_S = 10.0
log = logging.getLogger(__name__)


class AdmissionActivities:
    def __init__(self, client: Client, limits: dict[str, ProviderLimits], lease_s: float = 900.0,
                 breaker: BreakerPolicy | None = None):
        self.client = client
        self.limits = limits
        self.lease_s = lease_s
        self.breaker = breaker or BreakerPolicy()

    def limits_for(self, inp: AdmissionInput) -> ProviderLimits:
        return effective_limits(self.limits.get(inp.provider), inp.plan_limits)

    @activity.defn(name="request_slot")
    @classified_async
    async def request_slot(self, inp: AdmissionInput) -> SlotGrant | None:
        """The request in the gate's line; with `at_once` (grant-at-once-v1) the slot itself when the gate
        has one free for it now (None: its grant comes as a signal)."""
        limits = self.limits_for(inp)
        queue = activity.info().task_queue
        request = inp.request.model_copy(update={"limit": limits.max_concurrent,
                                                 "submits_per_minute": limits.submits_per_minute,
                                                 "breaker": self.breaker})
        gate = GateInput(provider=inp.provider, limit=limits.max_concurrent,
                         submits_per_minute=limits.submits_per_minute, lease_s=self.lease_s,
                         grant_signal=inp.grant_signal, breaker=self.breaker)
        gate_id = api.gate_id(inp.provider, queue)
        if not inp.at_once:
            await self.client.start_workflow(
                api.GATE_WORKFLOW_NAME, gate, id=gate_id, task_queue=queue, start_signal=api.SIGNAL_GATE_REQUEST,
                start_signal_args=[request], id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
            return None
        return await ask_gate(self.client, gate, gate_id, queue, request)


async def ask_gate(client: Client, gate: GateInput, gate_id: str, queue: str, request: SlotRequest) -> SlotGrant | None:
    """Start the gate if none runs, and ask it (its `ask` update); a gate from before grant-at-once-v1
    (no `ask`) gets the request as a signal, and the grant comes as a signal."""
    await client.start_workflow(api.GATE_WORKFLOW_NAME, gate, id=gate_id, task_queue=queue,
                                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
    handle = client.get_workflow_handle(gate_id)  # its latest run (it continues as new)
    try:
        return await handle.execute_update(api.UPDATE_GATE_ASK, request, result_type=SlotGrant)
    except (WorkflowUpdateFailedError, RPCError) as exc:
        log.warning("gate %s took no ask (%s): the request goes as a signal", gate_id, exc)
    await handle.signal(api.SIGNAL_GATE_REQUEST, request)
    return None


class GateNotices:
    """Tells a provider's gate what a threaded step learnt (the submit step: the provider accepted,
    renew-in-submit-v1), through the worker's client on the worker's event loop. Without a loop (built
    outside a running worker) it tells nothing and the workflow sends the renewal itself."""

    def __init__(self, client: Client | None, loop: asyncio.AbstractEventLoop | None):
        self.client, self.loop = client, loop

    @classmethod
    def on_running_loop(cls, client: Client | None) -> GateNotices:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        return cls(client, loop)

    def renew(self, gate_id: str, renewal: SlotRenewal) -> bool:
        """True once the gate took the renewal; False when it could not be told (the workflow then
        tells it: a renewal that reached it twice counts once, gate-renew-once-v1)."""
        return self._tell(gate_id, api.SIGNAL_GATE_RENEW, renewal, renewal.workflow_id)

    def release(self, gate_id: str, release: SlotRelease) -> bool:
        """True once the gate took the slot back; False when it could not be told (the workflow then
        gives it back: a release naming a slot no longer held changes nothing at the gate)."""
        return self._tell(gate_id, api.SIGNAL_GATE_RELEASE, release, release.workflow_id)

    def _tell(self, gate_id: str, signal_name: str, message: object, holder: str) -> bool:
        if self.client is None or self.loop is None:
            return False
        signal = self.client.get_workflow_handle(gate_id).signal(signal_name, message)
        try:
            asyncio.run_coroutine_threadsafe(signal, self.loop).result(timeout=NOTICE_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - a gate that is gone or slow: the workflow tells it instead
            log.warning("gate %s did not take %s of %s: %s", gate_id, signal_name, holder, exc)
            return False
        return True
