"""Small catalogs and plans made on the fly for integration tests."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path

from sqlalchemy import select

from catalog.plan import load_plan
from catalog.service import run_import
from control.starting import start_workflows
from schema import queries
from schema.db import Database
from schema.models import CreditEntry, Task

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def make_catalog(folder: Path, products: list[tuple[str, str, str]], image: str = "aurora-lamp.png") -> Path:
    """A plain-CSV catalog in `folder` whose products all use one example image."""
    (folder / "images").mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLES / "images" / image, folder / "images" / image)
    lines = ["product_id,title,description,image_url,price,currency,category"]
    lines += [f"{pid},{title},{desc},images/{image},19.99,USD,Home" for pid, title, desc in products]
    path = folder / "catalog.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def make_plan(folder: Path, *, locales=("en-US",), ratios=("9:16",), duration_s: int = 2, name: str = "t",
              extra: str = "", template_extra: str = "") -> Path:
    """A one-template plan; `extra` is TOML appended as is (e.g. a `[providers.emulator]` section),
    `template_extra` goes into the template's table (e.g. `review = "required"`)."""
    prompts = "\n".join(f'"{loc}" = "Product shot of {{title}}, {{price}}. {{hook}}"' for loc in locales)
    hooks = ", ".join(f'"{loc}" = "Hook {loc}"' for loc in locales)
    text = f"""
name = "{name}"
locales = {list(locales)!r}
aspect_ratios = {list(ratios)!r}

[[variants]]
id = "a"
hook = {{ {hooks} }}

[[templates]]
id = "tpl"
version = "tpl-v1"
duration_s = {duration_s}
cost_estimate = {duration_s + 1}
{template_extra}
[templates.prompts]
{prompts}
{extra}
"""
    path = folder / "plan.toml"
    path.write_text(text.replace("'", '"'))
    return path


def import_small(settings, folder: Path, products, **plan_kw):
    catalog = make_catalog(folder, products)
    plan = load_plan(make_plan(folder, **plan_kw))
    return run_import(settings, catalog, plan, catalog=f"cat-{folder.name}")


async def run_all(client, settings, import_id: str, queue: str, timeout: float = 240) -> list[Task]:
    db = Database(settings.database_url)
    with db.transaction() as session:
        tasks = queries.list_tasks(session, import_id)
    await start_workflows(client, tasks, import_id, queue)
    # A task that ends FAILED_FINAL or EXPIRED closes its workflow as Failed: the caller checks statuses.
    await asyncio.wait_for(
        asyncio.gather(*(client.get_workflow_handle(t.workflow_id).result() for t in tasks), return_exceptions=True),
        timeout=timeout,
    )
    with db.transaction() as session:
        return queries.list_tasks(session, import_id)


def assert_ledger_balanced(settings, task_ids) -> None:
    db = Database(settings.database_url)
    with db.transaction() as session:
        for task_id in task_ids:
            rows = session.scalars(select(CreditEntry).where(CreditEntry.task_id == task_id)).all()
            sums: dict[str, Decimal] = {}
            for r in rows:
                sums[r.entry_type] = sums.get(r.entry_type, Decimal(0)) + r.amount
            assert sums.get("RESERVE", 0) > 0, rows
            assert sums["RESERVE"] == sums.get("SETTLE", 0) + sums.get("RELEASE", 0), sums


async def wait_for_status(settings, task_id: str, wanted: set[str], timeout_s: float = 30) -> str:
    """Poll Postgres until the task is in one of `wanted`; fail the test with the last status."""
    import pytest

    db = Database(settings.database_url)
    for _ in range(int(timeout_s * 10)):
        with db.transaction() as session:
            status = session.get(Task, task_id).status
        if status in wanted:
            return status
        await asyncio.sleep(0.1)
    pytest.fail(f"task {task_id} never reached {sorted(wanted)} (last status {status})")


async def start_one_at_provider(settings, client, queue: str, folder: Path, product, duration_s: int = 8) -> Task:
    """Import one task, start its workflow, return once the provider has its job."""
    summary = import_small(settings, folder, [product], duration_s=duration_s)
    with Database(settings.database_url).transaction() as session:
        (task,) = queries.list_tasks(session, summary.import_id)
    await start_workflows(client, [task], summary.import_id, queue)
    await wait_for_status(settings, task.id, {"SUBMITTED", "RUNNING"})
    return task


async def stop_gates_of(client, queue: str) -> None:
    """After the last worker of `queue` stopped: end every provider's gate there (control/gates.py),
    so none is left waiting on a queue nothing serves (a later `status` would find it mute)."""
    from adapters.providers import HOSTED
    from control.gates import stop_gates

    await stop_gates(client, queue, ["emulator", *HOSTED])


@contextlib.asynccontextmanager
async def serving(client, settings, queue: str) -> AsyncIterator[None]:
    """An in-process worker on `queue` for the block; afterwards no gate is left waiting there."""
    from worker import build_worker

    async with build_worker(client, settings, task_queue=queue):
        yield
    await stop_gates_of(client, queue)


def gateway_log_after(settings, marker: str, timeout_s: float = 10.0, *, also: str = "") -> str:
    """The `dev up` gateway's log once a line holds `marker` (and `also`): uvicorn writes its access
    line and the gateway its request line after the response, each when it gets to it, so a test
    waits for the line it reads."""
    import time

    path = Path(settings.home) / "logs" / "gateway.log"
    deadline = time.monotonic() + timeout_s
    while True:
        text = path.read_text(errors="replace")
        if any(marker in line and also in line for line in text.splitlines()) or time.monotonic() > deadline:
            return text
        time.sleep(0.1)


def claim_dispatch(database_url: str, task_id: str) -> None:
    """Put a task where the workflow has it just before a submit (DISPATCHING), for tests that run
    the submit activity on its own: submit sends nothing for a task in any other status."""
    from contracts.task import TaskStatus

    with Database(database_url).transaction() as session:
        session.get(Task, task_id).status = TaskStatus.DISPATCHING.value
