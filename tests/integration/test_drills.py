"""Crash drills on the real stack: a real worker process is SIGKILLed at each failpoint, a clean
worker recovers, and the task still ends SUCCEEDED with one provider job and a balanced ledger.

The drills of the selected points run together once per module (each on its own task queue with
its own worker processes; recovery waits out the crashed activity's timeout, 15 to 60 s, so
running them one after another would take about six minutes); each test then checks its row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus

from activities.failpoints import POINTS
from contracts import workflow_api as api
from devstack.drill import DrillResult, run_drills

pytestmark = [pytest.mark.integration, pytest.mark.long]


def _attempts(ev: dict[str, Any]) -> list[tuple[str, bool]]:
    return [(a["submit_state"], bool(a["provider_job_id"])) for a in ev["attempts"]]


# What recovery must find where each failpoint fired: proof the process died at that point.
EXPECTED_EVIDENCE: dict[str, Callable[[dict[str, Any]], bool]] = {
    # attempt row SENDING, nothing sent
    "before_submit": lambda ev: ev["status"] == "DISPATCHING" and _attempts(ev) == [("SENDING", False)]
    and ev["provider_jobs"] == 0,
    # the provider created the job, we hold no job id
    "after_accept_before_record": lambda ev: ev["status"] == "DISPATCHING"
    and _attempts(ev) == [("SENDING", False)] and ev["provider_jobs"] == 1,
    # job id stored, no output yet
    "mid_poll": lambda ev: ev["status"] in ("SUBMITTED", "RUNNING") and _attempts(ev)[0][1] and not ev["assets"],
    # downloading: no raw object promoted, no row
    "mid_download": lambda ev: ev["status"] == "OUTPUT_FETCHING" and "raw" not in ev["objects"] and not ev["assets"],
    # raw object promoted, no asset row
    "after_store_before_db": lambda ev: ev["status"] == "OUTPUT_FETCHING" and ev["objects"].get("raw") == 1
    and not ev["assets"],
    # the proxy written, only the raw row recorded (HLS and thumbnail come in the next step)
    "after_transcode_before_db": lambda ev: ev["status"] == "POST_PROCESSING" and ev["assets"] == {"RAW_OUTPUT": 1}
    and "proxy" in ev["objects"],
    # renditions recorded, credit only reserved
    "before_settle": lambda ev: ev["status"] == "POST_PROCESSING"
    and {"RAW_OUTPUT", "PROXY", "HLS", "THUMBNAIL"} <= set(ev["assets"]) and set(ev["ledger"]) == {"RESERVE"},
}


def _selected_points(request: pytest.FixtureRequest) -> list[str]:
    """The points whose tests this session runs (`-k mid_poll` drills mid_poll only)."""
    chosen = [
        item.callspec.params["point"]
        for item in request.session.items
        if item.module is request.module and hasattr(item, "callspec") and "point" in item.callspec.params
    ]
    return [p for p in POINTS if p in chosen] or list(POINTS)


@pytest.fixture(scope="module")
async def drills(stack, request: pytest.FixtureRequest) -> dict[str, DrillResult]:
    results = await run_drills(stack, _selected_points(request), duration_s=1)
    return {r.point: r for r in results}


def test_every_point_has_expected_evidence():
    assert set(EXPECTED_EVIDENCE) == set(POINTS)


@pytest.mark.parametrize("point", POINTS)
async def test_drill(drills: dict[str, DrillResult], point: str, client):
    r = drills[point]
    detail = (f"{point}: {r.error or 'no error'}; armed worker {r.worker_exit}; evidence {r.evidence_text}; "
              f"outcome {r.outcome}; provider jobs {r.provider_jobs}; ledger {r.ledger} {r.ledger_violations}; "
              f"invariants broken {r.invariants}, unchecked {r.invariants_unchecked}; "
              f"task {r.task_id}; logs {r.logs}")
    assert r.error is None, detail
    assert r.reached and r.worker_exit == "SIGKILL", detail  # the failpoint really fired
    assert EXPECTED_EVIDENCE[point](r.evidence), detail
    assert r.outcome == "SUCCEEDED", detail
    assert r.provider_jobs == 1, detail
    assert r.ledger_balanced, detail
    assert r.invariants == {} and r.invariants_unchecked == [], detail  # control/invariants.py, every rule
    assert r.ok, detail
    gate = await client.get_workflow_handle(api.gate_id("emulator", r.task_queue)).describe()
    assert gate.status == WorkflowExecutionStatus.TERMINATED, f"{point}: the drill left its gate {gate.status.name}"
