"""`resolve --accept-duplicate-risk` of an unknown submit books the risk (duplicate-risk-held-v1): the
unknown attempt's estimate is held beside the task's reservation before a new attempt is sent, so the
tenant's credit counts both possible jobs; without the credit for it the task fails and sends nothing."""

from __future__ import annotations

import pytest
from temporalio.exceptions import ApplicationError
from test_generation_paths import NOT_ASKABLE
from workflow_fakes import RESERVED, accepted, ending, resolve, unknown, until

from activities.errors import INSUFFICIENT_CREDIT
from contracts.messages import ResolveAction
from contracts.task import TaskStatus as S
from workflows.generation.patches import RISK_HELD

pytestmark = pytest.mark.histories(RISK_HELD)


async def accept_the_risk(env, world, run_world) -> str:
    world.submits, world.reconciles = [unknown(), accepted("job-2")], [NOT_ASKABLE]
    handle = await run_world()
    await until(env, lambda: world.status is S.NEEDS_ATTENTION)
    await resolve(handle, ResolveAction.ACCEPT_DUPLICATE_RISK, "support says at most one job")
    return await ending(handle)


async def test_accepting_the_risk_holds_the_first_jobs_estimate_before_a_new_submit(env, world, run_world):
    assert await accept_the_risk(env, world, run_world) == "completed"
    assert [r.hold_for_attempt for r in world.called("reserve_credit")] == [1]  # the task's own: prepare_task's
    assert world.times("reserve_credit")[0] < world.times("submit")[1]
    decided = next(t.payload for t in world.transitions if t.event.value == "attention_resolved")
    assert decided["risk_held_for_attempt"] == 1
    # Both holds closed when the task settled: the new job's cost, the rest released.
    assert world.sums() == {"RESERVE": 2 * RESERVED, "SETTLE": 3, "RELEASE": 2 * RESERVED - 3}


async def test_no_credit_for_the_risk_fails_the_task_and_sends_nothing(env, world, run_world):
    world.reserves = [None, ApplicationError("tenant has 1 credit", type=INSUFFICIENT_CREDIT, non_retryable=True)]
    assert await accept_the_risk(env, world, run_world) == "failed:FAILED_FINAL"
    assert len(world.called("submit")) == 1 and world.abandoned == [1]
    final = world.transitions[-1]
    assert final.error_class == "credit" and "duplicate risk of attempt 1" in final.error
    assert world.sums() == {"RESERVE": RESERVED, "RELEASE": RESERVED}
