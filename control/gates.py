"""What each provider's gate (workflows/provider_gate.py) says now: slots in use and the limit, the
effective limit after refusals, tasks waiting and the oldest wait. Read by `reelqueue status`."""

from __future__ import annotations

from temporalio.service import RPCError

from adapters.temporal_client import connect
from config.settings import Settings
from schema.admission import GateSnapshot
from workflows import api


async def gate_snapshots(settings: Settings, providers: list[str]) -> dict[str, GateSnapshot | None]:
    """provider -> its gate's snapshot, or None when no gate runs for it (nothing asked yet)."""
    client = await connect(settings.temporal_address, settings.temporal_namespace)
    out: dict[str, GateSnapshot | None] = {}
    for provider in providers:
        handle = client.get_workflow_handle(api.gate_id(provider, settings.task_queue))
        try:
            out[provider] = await handle.query(api.QUERY_GATE_SNAPSHOT, result_type=GateSnapshot)
        except RPCError:
            out[provider] = None
    return out
