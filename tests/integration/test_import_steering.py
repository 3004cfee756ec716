"""Steering a whole import on the real stack: `imports`, `cancel --import --status`, `pause` /
`resume` (a paused import submits nothing new, its queued tasks say so in `show` and in the Temporal
Web UI, and all of them succeed after resume), `show`'s place in line, `run --wait --timeout` (exit 3).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import httpx
import pytest
from cli_helpers import run_cli_async
from sqlalchemy import func, select
from stack_helpers import assert_ledger_balanced, import_small
from test_review_gallery import BROWSER_ARGS, CHROMIUM, _browser_or_skip

from contracts import workflow_api as api
from contracts.messages import LiveDetails
from control.starting import start_workflows
from schema import queries
from schema.db import Database
from schema.import_scope import in_import
from schema.models import Attempt, StateEvent, Task
from schema.state_machine import TERMINAL

pytestmark = pytest.mark.integration

TASKS = 40
LIMIT = 6  # [providers.emulator] max_concurrent: most of the import waits in line when it is paused
JOB_S = 1.5  # the emulator's job time (3 s by default): the 40 go through quickly after resume


def _submits(db: Database, import_id: str) -> int:
    with db.transaction() as session:
        return session.scalar(select(func.count()).select_from(Attempt).where(
            Attempt.task_id.in_(select(Task.id).where(in_import(import_id))))) or 0


def _tasks(db: Database, import_id: str):  # noqa: ANN202
    with db.transaction() as session:
        return queries.list_tasks(session, import_id)


async def _in_line_all_paused(client, db: Database, import_id: str) -> bool:  # noqa: ANN001 - a Client
    """Every task still QUEUED has taken its import's pause in (its workflow's current step)."""
    for task in _tasks(db, import_id):
        if task.status == "QUEUED":
            details = await client.get_workflow_handle(task.workflow_id).query(api.QUERY_DETAILS,
                                                                                result_type=LiveDetails)
            if details.step != "paused":
                return False
    return True


async def _until(check, timeout_s: float, what: str):  # noqa: ANN001, ANN202
    """`check()` (awaited when it is a coroutine) until it gives something true."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        found = await found if asyncio.iscoroutine(found) else found
        if found:
            return found
        await asyncio.sleep(0.3)
    pytest.fail(f"{what}: not within {timeout_s:.0f} s")


@pytest.mark.timeout(600)
async def test_a_paused_import_submits_nothing_until_resumed(stack, client, task_queue, tmp_path, monkeypatch):
    monkeypatch.setenv("REELQUEUE_TASK_QUEUE", task_queue)  # the CLI asks this queue's gate
    db = Database(stack.database_url)
    products = [(f"P-{i:02d}", f"Paused item {i}", f"Thing {i}") for i in range(TASKS)]
    imp = import_small(stack, tmp_path, products, duration_s=1,
                       extra=f"[providers.emulator]\nmax_concurrent = {LIMIT}\n").import_id
    httpx.post(f"{stack.emulator_url}/_sim/faults", json={"job_seconds": JOB_S}, timeout=10).raise_for_status()
    try:
        await _pause_and_resume(stack, client, task_queue, db, imp)
    finally:
        httpx.delete(f"{stack.emulator_url}/_sim/faults", timeout=10)
    assert _submits(db, imp) == TASKS
    assert_ledger_balanced(stack, [t.id for t in _tasks(db, imp)])
    listed = await run_cli_async("imports", "--json")
    row = next(r for r in listed.json["imports"] if r["id"] == imp)
    assert row["by_status"] == {"SUCCEEDED": TASKS} and row["paused_by"] is None
    assert row["credits"]["RESERVE"] == row["credits"]["SETTLE"] + row["credits"].get("RELEASE", 0) > 0


async def _pause_and_resume(stack, client, task_queue: str, db: Database, imp: str) -> None:  # noqa: ANN001
    await start_workflows(client, _tasks(db, imp), imp, task_queue)

    async def waiting_in_line():  # noqa: ANN202 - a queued task whose show prints its place
        for task in (t for t in _tasks(db, imp) if t.status == "QUEUED"):
            shown = await run_cli_async("show", task.id)
            if "place in line at emulator:" in shown.stdout:
                return shown.stdout
        return None

    shown = await _until(waiting_in_line, 30, "a queued task's place in line in `show`")
    assert "waiting for a slot at provider emulator" in shown

    paused = await run_cli_async("pause", imp, "--by", "ops", "--reason", "budget check", "--json")
    assert paused.code == 0, paused.stdout + paused.stderr
    assert paused.json["changed"] and paused.json["told"] + paused.json["not_running"] == TASKS - sum(
        t.status in TERMINAL for t in _tasks(db, imp))
    # A task granted before its workflow took the pause in goes on and submits: wait until every
    # task still in line says it is paused; from then on only tasks already past the gate have
    # attempts, and they have them already.
    await _until(lambda: _in_line_all_paused(client, db, imp), 60, "every task in line paused")
    before = _submits(db, imp)
    await asyncio.sleep(5.0)
    assert _submits(db, imp) == before < TASKS  # nothing new while paused (jobs running went on)
    queued = [t for t in _tasks(db, imp) if t.status == "QUEUED"]
    assert queued, "every task was submitted before the pause"
    shown = await run_cli_async("show", queued[0].id, "--json")
    assert shown.json["live"]["step"] == "paused" and shown.json["live"]["waiting_for"] == "paused by ops"
    with db.transaction() as session:
        audit = session.scalars(select(StateEvent).where(StateEvent.task_id == queued[0].id,
                                                         StateEvent.event == "IMPORT_PAUSED")).all()
    assert [(e.payload["by"], e.payload["reason"], e.applied) for e in audit] == [("ops", "budget check", False)]
    timed_out = await run_cli_async("run", imp, "--wait", "--timeout", "1")
    assert timed_out.code == 3 and "timed out" in timed_out.stdout
    await _web_ui_shows(stack, queued[0].workflow_id, "import paused by ops")

    resumed = await run_cli_async("resume", imp, "--by", "ops")
    assert resumed.code == 0, resumed.stdout + resumed.stderr
    # 40 tasks through 6 slots, then their media steps: 60 s on a quiet machine, past 120 s under the
    # suite's load of five stacks (seen once, at a load average of 14)
    await _until(lambda: all(t.status == "SUCCEEDED" for t in _tasks(db, imp)), 300,
                 "every task SUCCEEDED after resume")


async def _web_ui_shows(stack, workflow_id: str, text: str) -> None:
    """The Temporal Web UI's page of the workflow shows its current details (headless Chromium)."""
    async_playwright = _browser_or_skip()
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_ARGS)
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        await page.goto(f"{stack.temporal_ui_url}/namespaces/default/workflows/{workflow_id}")
        await page.get_by_text("User Metadata", exact=True).first.click(timeout=30_000)  # current details' tab
        shown = await _until(lambda: _frames_text(page, text), 30, "the current details on the Web UI's page")
        assert "QUEUED" in shown
        await browser.close()


async def _frames_text(page, text: str) -> str | None:  # noqa: ANN001 - a playwright Page
    """The text of the frame that shows `text` (the UI renders markdown details in a frame of its own)."""
    for frame in page.frames:
        with contextlib.suppress(Exception):  # a frame may be detached while it is read
            body = await frame.inner_text("body")
            if text in body:
                return body
    return None


async def test_imports_lists_and_cancel_import_ends_tasks_by_status(stack, tmp_path):
    imp = import_small(stack, tmp_path, [("K-1", "Kettle", "Hot"), ("K-2", "Kite", "High")]).import_id
    listed = await run_cli_async("imports", "--json")
    row = next(r for r in listed.json["imports"] if r["id"] == imp)
    assert (row["catalog"], row["plan"], row["tasks"], row["by_status"]) == (f"cat-{tmp_path.name}", "t", 2,
                                                                              {"CREATED": 2})
    none = await run_cli_async("cancel", "--import", imp, "--status", "QUEUED", "--json")
    assert (none.json["tasks"], none.json["canceled"]) == (0, 0)
    bad = await run_cli_async("cancel", "--import", imp, "--status", "NOPE")
    assert bad.code == 2
    done = await run_cli_async("cancel", "--import", imp, "--status", "CREATED", "--json")
    assert done.code == 0 and (done.json["tasks"], done.json["canceled"]) == (2, 2)
    assert {t.status for t in _tasks(Database(stack.database_url), imp)} == {"CANCELED"}
