"""Ask a provider's gate (workflows/provider_gate.py) for a slot, starting the gate if needed.

Signal-with-start, so the first task of a provider brings its gate up; the limits (configuration
merged with the task's plan) and the breaker's policy travel with every ask, so a changed limit
reaches a running gate with the next request.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy

from activities.errors import classified_async
from schema.admission import AdmissionInput, BreakerPolicy, GateInput, ProviderLimits, effective_limits
from workflows import api


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
    async def request_slot(self, inp: AdmissionInput) -> None:
        limits = self.limits_for(inp)
        queue = activity.info().task_queue
        request = inp.request.model_copy(update={"limit": limits.max_concurrent,
                                                 "submits_per_minute": limits.submits_per_minute,
                                                 "breaker": self.breaker})
        await self.client.start_workflow(
            api.GATE_WORKFLOW_NAME,
            GateInput(provider=inp.provider, limit=limits.max_concurrent, submits_per_minute=limits.submits_per_minute,
                      lease_s=self.lease_s, grant_signal=inp.grant_signal, breaker=self.breaker),
            id=api.gate_id(inp.provider, queue), task_queue=queue,
            start_signal=api.SIGNAL_GATE_REQUEST, start_signal_args=[request],
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
