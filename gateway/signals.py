"""Signalling a task's workflow with a provider update, from the gateway.

The signal goes out with a request id derived from the event (provider + webhook id): Temporal
records a signal once per request id, so a delivery retried after a lost answer, or two copies of
one event racing through two gateway processes, reach the workflow once. The high-level
`WorkflowHandle.signal` draws a random request id, hence the direct service call here.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta

from temporalio.api.common.v1 import Payloads, WorkflowExecution
from temporalio.api.workflowservice.v1 import SignalWorkflowExecutionRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from contracts.messages import ProviderUpdate
from contracts.workflow_api import SIGNAL_PROVIDER_UPDATE

_REQUEST_IDS = uuid.UUID("5b0e3d52-2b7e-4c55-9d1e-3f6f0d7a9c11")  # namespace of our signal request ids


class SignalUnavailable(Exception):
    """Temporal could not be reached or refused for a reason other than a closed workflow."""


def signal_request_id(provider: str, event_id: str) -> str:
    return str(uuid.uuid5(_REQUEST_IDS, f"{provider}:{event_id}"))


class TemporalSignaler:
    """Connects on first use (the gateway starts, and answers /healthz, without Temporal)."""

    def __init__(self, connect: Callable[[], Awaitable[Client]], *, timeout_s: float = 5.0):
        self._connect = connect
        self._timeout = timedelta(seconds=timeout_s)
        self._client: Client | None = None
        self._lock = asyncio.Lock()

    async def _get_client(self) -> Client:
        async with self._lock:
            if self._client is None:
                try:
                    self._client = await asyncio.wait_for(self._connect(), self._timeout.total_seconds())
                except (RuntimeError, OSError, TimeoutError) as exc:
                    raise SignalUnavailable(f"cannot connect to Temporal: {type(exc).__name__}") from exc
            return self._client

    async def signal(self, workflow_id: str, update: ProviderUpdate, request_id: str) -> bool:
        """True once the workflow has the signal; False if it is closed or unknown (a no-op)."""
        client = await self._get_client()
        request = SignalWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=workflow_id),
            signal_name=SIGNAL_PROVIDER_UPDATE,
            input=Payloads(payloads=await client.data_converter.encode([update])),
            identity=client.identity,
            request_id=request_id,
        )
        try:
            await client.workflow_service.signal_workflow_execution(request, retry=False, timeout=self._timeout)
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:  # closed (completed, failed, ...) or never started
                return False
            raise SignalUnavailable(f"Temporal refused the signal: {exc.status.name}") from exc
        return True
