"""A tenant's concurrency on the time-skipping server (tenant-admission-v1): its tasks hold a slot
of the tenant's gate while they generate, so no more of them run at once than its limit, while
another tenant's tasks go on beside them; a task cancelled while it waits for its tenant leaves the
queue without a job.

`REELQUEUE_RECORD_HISTORIES=1` records the histories into tests/fixtures/histories/<workflow>/tenant-admission-v1/.
"""

from __future__ import annotations

from datetime import timedelta

from fleet_fakes import Fleet, running_fleet
from histories import record
from test_admission_bounds import finish, snapshot
from workflow_fakes import until

from contracts import workflow_api as api
from contracts.messages import CancelRequest
from contracts.task import TaskStatus as S
from workflows.generation.patches import TENANT_ADMISSION


async def test_a_tenant_runs_at_most_its_limit_and_another_tenant_runs_beside_it(own_env):
    fleet = Fleet(limit=5, job_s=180.0, tenant_limit=1,
                  tenants={"a1": "acme", "a2": "acme", "a3": "acme", "b1": "other"})
    async with running_fleet(own_env, fleet) as run:
        for task_id in ("a1", "a2", "a3", "b1"):
            await run.start(task_id)
            await own_env.sleep(1)
        await finish(own_env, fleet, run)
        tenant_gate = own_env.client.get_workflow_handle(api.gate_id(api.tenant_gate("acme"), run.queue))
        gate = await snapshot(tenant_gate)
        await record(run.handles[1], TENANT_ADMISSION, "second_of_a_tenant_waits_for_the_first")
        await record(tenant_gate, TENANT_ADMISSION, "tenant_gate")
    assert {fleet.status[t] for t in ("a1", "a2", "a3", "b1")} == {S.SUCCEEDED}
    acme = sorted((j for j in fleet.jobs.values() if j.task_id.startswith("a")), key=lambda j: j.submitted_at)
    job = timedelta(seconds=fleet.job_s)
    assert [j.task_id for j in acme] == ["a1", "a2", "a3"]
    assert all(later.submitted_at >= earlier.submitted_at + job for earlier, later in zip(acme, acme[1:], strict=False))
    other = next(j for j in fleet.jobs.values() if j.task_id == "b1")
    assert other.submitted_at < acme[0].submitted_at + job  # not behind acme's queue
    assert (gate.limit, gate.in_use, gate.waiting, gate.granted) == (1, 0, 0, 3)
    assert all(fleet.balanced(t) for t in ("a1", "a2", "a3", "b1"))


async def test_a_task_cancelled_while_it_waits_for_its_tenant_leaves_the_queue(own_env):
    fleet = Fleet(limit=5, job_s=600.0, tenant_limit=1, tenants={"first": "acme", "second": "acme"})
    async with running_fleet(own_env, fleet) as run:
        await run.start("first")
        await own_env.sleep(1)
        second = await run.start("second")
        await until(own_env, lambda: fleet.status["second"] is S.QUEUED and fleet.jobs_of("first") == 1)
        tenant_gate = own_env.client.get_workflow_handle(api.gate_id(api.tenant_gate("acme"), run.queue))
        await until(own_env, lambda: True, step_s=5, tries=1)
        assert (await snapshot(tenant_gate)).waiting == 1
        await second.signal(api.SIGNAL_CANCEL, CancelRequest(reason="changed my mind", requested_by="test"))
        await until(own_env, lambda: fleet.status["second"] is S.CANCELED)
        waiting = (await snapshot(tenant_gate)).waiting
        await finish(own_env, fleet, run)
        await record(second, TENANT_ADMISSION, "cancelled_while_waiting_for_the_tenant")
    assert fleet.jobs_of("second") == 0 and fleet.balanced("second")
    assert waiting == 0 and fleet.status["first"] is S.SUCCEEDED
