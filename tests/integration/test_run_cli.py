"""`reelqueue run` on the real stack: tasks are read page by page, and `--wait` does not wait on
tasks nothing will move."""

from __future__ import annotations

import pytest
from cli_helpers import run_cli_async
from stack_helpers import import_small

from schema import queries
from schema.db import Database

pytestmark = pytest.mark.integration


async def test_tasks_are_read_in_pages_each_once(stack, tmp_path):
    summary = import_small(stack, tmp_path, [(f"P-{i}", f"Pen {i}", "A pen") for i in range(5)], duration_s=1)
    db = Database(stack.database_url)
    ids = [row.id for row in queries.iter_tasks_to_start(db, summary.import_id, page_size=2)]
    with db.transaction() as session:
        every = sorted(t.id for t in queries.list_tasks(session, summary.import_id))
    assert ids == every and len(ids) == 5


async def test_unsupported_duration_ends_invalid_and_wait_returns(stack, task_queue, tmp_path, monkeypatch):
    """A 30-second template for a provider that renders at most 10 s: INVALID, no submit, and
    `run --wait` comes back on its own (long before its timeout) with a failing exit code."""
    summary = import_small(stack, tmp_path, [("L-1", "Lamp", "A lamp"), ("L-2", "Lamp 2", "Another lamp")],
                           duration_s=30)
    monkeypatch.setenv("REELQUEUE_TASK_QUEUE", task_queue)
    out = await run_cli_async("run", summary.import_id, "--wait", "--timeout", "300", "--json")
    assert out.code == 1, out.stdout
    assert out.json["by_status"] == {"INVALID": 2} and out.json["started"] == 2, out.stdout
    with Database(stack.database_url).transaction() as session:
        for task in queries.list_tasks(session, summary.import_id):
            detail = queries.task_detail(session, task.id)
            assert "outside" in detail["task"]["last_error"] and detail["attempts"] == [], detail["task"]
    again = await run_cli_async("run", summary.import_id, "--json")  # an ended run is not started twice
    assert again.code == 0 and again.json["started"] == 0, again.stdout

