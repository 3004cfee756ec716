"""What each provider's gate (workflows/provider_gate.py) says now: slots in use and the limit, the
effective limit after refusals, tasks waiting and the oldest wait. Read by `reelqueue status`.

A query is answered by a worker, so a gate whose queue no worker polls would hold the caller until
Temporal gives up (30 s); the gates are read together within GATE_READ_S and an unanswered one is
reported stale, so `status` answers whatever Temporal's state."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

from pydantic import BaseModel
from temporalio.client import Client, WorkflowQueryFailedError, WorkflowQueryRejectedError
from temporalio.common import QueryRejectCondition
from temporalio.service import RPCError, RPCStatusCode

from adapters.temporal_client import connect
from config.settings import Settings
from contracts import workflow_api as api
from contracts.admission import GateSnapshot
from contracts.messages import LiveDetails

GATE_READ_S = 0.5  # connecting and every gate's query together; `status` must answer within 2 s
LIVE_READ_S = 3.0  # `show`: connecting, and each of the task's and its gate's queries


class GateReading(BaseModel):
    """A gate's figures (None when it did not answer in time) and whether they are missing."""

    snapshot: GateSnapshot | None = None
    stale: bool = False
    reason: str | None = None

    def as_json(self) -> dict:
        """The snapshot's keys (null when stale), plus `stale` and `reason`: the same keys every time."""
        figures = self.snapshot.model_dump(mode="json") if self.snapshot else dict.fromkeys(GateSnapshot.model_fields)
        return {**figures, "stale": self.stale, "reason": self.reason}


async def gate_snapshots(settings: Settings, providers: list[str],
                         budget_s: float = GATE_READ_S) -> dict[str, GateReading | None]:
    """provider -> its gate's reading, or None when no gate runs for it (nothing asked yet, or ended)."""
    deadline = time.monotonic() + budget_s
    try:
        client = await asyncio.wait_for(connect(settings), budget_s)
    except (TimeoutError, RuntimeError) as exc:  # unreachable, or no answer in time
        reading = GateReading(stale=True, reason=f"Temporal not reachable: {exc or 'no answer'}")
        return dict.fromkeys(providers, reading)
    readings = await asyncio.gather(*(_read(client, api.gate_id(p, settings.task_queue), deadline)
                                      for p in providers))
    return dict(zip(providers, readings, strict=True))


async def _read(client: Client, gate_id: str, deadline: float) -> GateReading | None:
    left = max(deadline - time.monotonic(), 0.05)
    try:
        snapshot = await client.get_workflow_handle(gate_id).query(
            api.QUERY_GATE_SNAPSHOT, result_type=GateSnapshot, rpc_timeout=timedelta(seconds=left),
            reject_condition=QueryRejectCondition.NOT_OPEN)  # a closed gate answers at once, worker or not
    except WorkflowQueryRejectedError:
        return None
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        return GateReading(stale=True, reason=f"gate {gate_id} did not answer within {left:.1f} s "
                                              f"(no worker on its task queue?): {exc.status.name}")
    return GateReading(snapshot=snapshot)


async def stop_gates(client: Client, task_queue: str, providers: list[str]) -> list[str]:
    """End the gates of a task queue no worker will serve again (a drill's or a test's own queue):
    left running, each would wait there for ever, and a `status` that reads it would find it mute.
    Returns the gates ended (one that does not run is skipped)."""
    ended: list[str] = []
    for provider in providers:
        gate = client.get_workflow_handle(api.gate_id(provider, task_queue))
        try:
            await gate.terminate(f"task queue {task_queue} is no longer served")
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
            continue
        ended.append(gate.id)
    return ended


async def live_details(settings: Settings, workflow_id: str, provider: str,
                       budget_s: float = LIVE_READ_S) -> LiveDetails | None:
    """What a running task's workflow says it does now (the `details` query), with its place in its
    provider's line when it waits for a slot; None when it does not run or did not answer in time."""
    try:
        client = await asyncio.wait_for(connect(settings), budget_s)
        details = await client.get_workflow_handle(workflow_id).query(
            api.QUERY_DETAILS, result_type=LiveDetails, rpc_timeout=timedelta(seconds=budget_s),
            reject_condition=QueryRejectCondition.NOT_OPEN)
        if details.step == "waiting_for_slot":
            details.position = await client.get_workflow_handle(api.gate_id(provider, settings.task_queue)).query(
                api.QUERY_GATE_POSITION, workflow_id, result_type=int | None, rpc_timeout=timedelta(seconds=budget_s))
    except (TimeoutError, RuntimeError, RPCError, WorkflowQueryRejectedError, WorkflowQueryFailedError):
        return None  # not started, closed, a workflow from before the query, or no worker answering
    return details
