"""GateNotices (activities/admission.py): the submit step, a threaded activity, tells the provider's gate
of an accepted submit through the worker's client on the worker's event loop (renew-in-submit-v1); when
it cannot, it says so and the workflow sends the renewal itself."""

from __future__ import annotations

import asyncio
import threading

from temporalio.service import RPCError, RPCStatusCode

from activities.admission import GateNotices
from contracts import workflow_api as api
from contracts.admission import SlotRenewal

RENEWAL = SlotRenewal(workflow_id="gen-t1", token=7, accepted=True)


class _Handle:
    def __init__(self, client: _Client, workflow_id: str):
        self.client, self.workflow_id = client, workflow_id

    async def signal(self, name: str, arg: object) -> None:
        if self.client.gone:
            raise RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b"")
        self.client.sent.append((self.workflow_id, name, arg, threading.current_thread().name))


class _Client:
    """What GateNotices uses of temporalio's Client: a workflow handle's signal."""

    def __init__(self, *, gone: bool = False):
        self.sent: list[tuple[str, str, object, str]] = []
        self.gone = gone

    def get_workflow_handle(self, workflow_id: str) -> _Handle:
        return _Handle(self, workflow_id)


async def test_a_threaded_step_tells_the_gate_on_the_workers_loop():
    client = _Client()
    notices = GateNotices.on_running_loop(client)  # type: ignore[arg-type]
    told = await asyncio.to_thread(notices.renew, "gate-fake", RENEWAL)
    assert told is True
    assert client.sent == [("gate-fake", api.SIGNAL_GATE_RENEW, RENEWAL, threading.current_thread().name)]


async def test_a_gate_that_is_gone_is_not_told_and_the_workflow_renews():
    notices = GateNotices.on_running_loop(_Client(gone=True))  # type: ignore[arg-type]
    assert await asyncio.to_thread(notices.renew, "gate-fake", RENEWAL) is False


def test_built_outside_a_running_worker_it_tells_nothing():
    client = _Client()
    assert GateNotices.on_running_loop(client).renew("gate-fake", RENEWAL) is False  # type: ignore[arg-type]
    assert client.sent == []
