"""Rolling deploys with Worker Versioning on the real dev server: two builds of the workers side by side,
the newer one with a changed workflow command. A pinned run started on the older build finishes there,
a run started after the newer build is promoted stays on it, and no workflow task fails (the newer
code never replays a history the older one wrote: without pinning it would, and fail on the command)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.common import VersioningBehavior
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():  # the sandbox re-imports this module for the probes
    from config.settings import Settings
    from control.worker_versions import current_build, promote
    from worker import deployment_config

PROBE = "VersioningProbe"


@activity.defn(name="versioning_probe_step")
async def probe_step(build: str) -> str:
    return build


class _Probe:
    """Waits for `proceed`, then runs one activity that names the build."""

    def __init__(self) -> None:
        self.go = False

    @workflow.signal
    def proceed(self) -> None:
        self.go = True


@workflow.defn(name=PROBE, versioning_behavior=VersioningBehavior.PINNED)
class ProbeV1(_Probe):
    @workflow.run
    async def run(self) -> str:
        await workflow.wait_condition(lambda: self.go)
        return await workflow.execute_activity(probe_step, "1", start_to_close_timeout=timedelta(seconds=30))


@workflow.defn(name=PROBE, versioning_behavior=VersioningBehavior.PINNED)
class ProbeV2(_Probe):
    """The next build: a timer first, a command the first build's histories lack where this build
    would look for it."""

    @workflow.run
    async def run(self) -> str:
        await workflow.sleep(timedelta(milliseconds=100))
        await workflow.wait_condition(lambda: self.go)
        return await workflow.execute_activity(probe_step, "2", start_to_close_timeout=timedelta(seconds=30))


def _worker(client: Client, stack: Settings, queue: str, deployment: str, build: str, probe: type) -> Worker:
    settings = stack.model_copy(update={"worker_deployment_name": deployment, "worker_build_id": build})
    return Worker(client, task_queue=queue, workflows=[probe], activities=[probe_step],
                  deployment_config=deployment_config(settings))


async def _started(client: Client, queue: str) -> WorkflowHandle:
    """A run whose first workflow task is done (so its build is fixed), waiting for its signal."""
    handle = await client.start_workflow(PROBE, id=f"probe-{uuid.uuid4().hex[:10]}", task_queue=queue)
    async with asyncio.timeout(60):
        while not [e async for e in handle.fetch_history_events()
                   if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED]:
            await asyncio.sleep(0.2)
    return handle


async def _builds(handle: WorkflowHandle) -> tuple[set[str], int]:
    """(builds that completed its workflow tasks, workflow tasks failed)."""
    builds, failed = set(), 0
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            builds.add(event.workflow_task_completed_event_attributes.deployment_version.build_id)
        failed += event.event_type in (EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
                                       EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT)
    return builds, failed


async def test_runs_stay_on_the_build_they_started_on_and_no_workflow_task_fails(stack: Settings, client) -> None:
    queue, deployment = f"versioning-{uuid.uuid4().hex[:10]}", f"reelqueue-{uuid.uuid4().hex[:8]}"
    async with _worker(client, stack, queue, deployment, "1", ProbeV1):
        assert await promote(client, deployment, "1", wait_s=60) is None  # the first deploy: nothing before it
        older = await _started(client, queue)
        async with _worker(client, stack, queue, deployment, "2", ProbeV2):  # both builds poll the queue now
            assert await promote(client, deployment, "2", wait_s=60) == "1"
            assert await current_build(client, deployment) == "2"
            newer = await _started(client, queue)
            await newer.signal(ProbeV2.proceed)
            await older.signal(ProbeV1.proceed)
            async with asyncio.timeout(90):
                assert (await older.result(), await newer.result()) == ("1", "2")
    assert await _builds(older) == ({"1"}, 0)
    assert await _builds(newer) == ({"2"}, 0)


async def test_the_pipeline_runs_on_versioned_workers(stack: Settings, client, tmp_path) -> None:
    """build_worker with REELQUEUE_WORKER_DEPLOYMENT_NAME / _BUILD_ID set: a task goes to SUCCEEDED on
    the promoted build, its generation run pinned to it, its provider gate on auto-upgrade."""
    from stack_helpers import import_small, run_all, serving

    queue, deployment = f"versioned-{uuid.uuid4().hex[:10]}", f"reelqueue-{uuid.uuid4().hex[:8]}"
    settings = stack.model_copy(update={"worker_deployment_name": deployment, "worker_build_id": "r1"})
    summary = import_small(stack, tmp_path, [("SKU-V1", "Versioned lamp", "A lamp on a versioned worker")],
                           duration_s=1)
    async with serving(client, settings, queue):
        await promote(client, deployment, "r1", wait_s=60)
        tasks = await run_all(client, stack, summary.import_id, queue)
    assert [t.status for t in tasks] == ["SUCCEEDED"]
    run = client.get_workflow_handle(tasks[0].workflow_id)
    assert await _builds(run) == ({"r1"}, 0)
    behaviours = {e.workflow_task_completed_event_attributes.versioning_behavior
                  async for e in run.fetch_history_events()
                  if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED}
    assert behaviours == {VersioningBehavior.PINNED.value}
