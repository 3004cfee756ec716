"""A task's priority class on the real stack (docs/architecture.md, "Admission"): a generation of the
tenant API is interactive, an imported task bulk, and an import whose catalog takes the API's name
stays bulk: the class follows from the import that created the task, which no tenant chooses."""

from __future__ import annotations

import pytest
from stack_helpers import make_catalog, make_plan
from test_api_generations import _image, _tenant, _until, gateway

from catalog.plan import load_plan
from catalog.service import run_import
from config.settings import Settings
from contracts.admission import PriorityClass
from reelqueue_client import GenerationRequest, ReelqueueClient
from schema import queries
from schema.db import Database
from schema.import_scope import API_CATALOG, task_priority
from schema.models import Task

pytestmark = pytest.mark.timeout(180)


def _classes(db: Database, task_ids: list[str]) -> set[PriorityClass]:
    with db.transaction() as session:
        return {task_priority(session, session.get(Task, t)) for t in task_ids}


async def test_an_api_generation_is_interactive_and_an_import_bulk_even_under_the_apis_name(
        stack: Settings, task_queue: str, tmp_path) -> None:
    db = Database(stack.database_url)
    tenant, key = _tenant(db)
    image = _image(stack, db, tenant)
    with gateway(stack, task_queue) as base:
        api = ReelqueueClient(base, key)
        gen = api.create_generation(GenerationRequest(prompt="a lamp", image_asset_id=image, duration_s=1))
        assert (await _until(api, gen.id, {"SUCCEEDED", "FAILED_FINAL", "INVALID"})).status == "SUCCEEDED"
    plan = load_plan(make_plan(tmp_path))
    imported = run_import(stack, make_catalog(tmp_path, [(f"P-{tmp_path.name}", "A lamp", "Bright")]), plan,
                          catalog=f"cat-{tmp_path.name}")
    forged = run_import(stack, make_catalog(tmp_path, [(f"F-{tmp_path.name}", "A lamp", "Bright")]), plan,
                        catalog=API_CATALOG)
    with db.transaction() as session:
        imported_ids = [t.id for t in queries.list_tasks(session, imported.import_id)]
        forged_ids = [t.id for t in queries.list_tasks(session, forged.import_id)]
    assert _classes(db, [gen.id]) == {PriorityClass.INTERACTIVE}
    assert _classes(db, imported_ids) == {PriorityClass.BULK}
    assert forged_ids and _classes(db, forged_ids) == {PriorityClass.BULK}


async def test_a_generation_may_ask_for_bulk_and_an_operators_plan_for_interactive(
        stack: Settings, task_queue: str, tmp_path) -> None:
    """Each class is settable within what its author may use: an API call lowers itself to bulk; an
    operator's plan (`reelqueue import`) raises its import to interactive (a tenant's is refused that)."""
    db = Database(stack.database_url)
    tenant, key = _tenant(db)
    image = _image(stack, db, tenant)
    with gateway(stack, task_queue) as base:
        api = ReelqueueClient(base, key)
        gen = api.create_generation(GenerationRequest(prompt="a lamp, later", image_asset_id=image, duration_s=1,
                                                      priority="bulk"))
        assert (await _until(api, gen.id, {"SUCCEEDED", "FAILED_FINAL", "INVALID"})).status == "SUCCEEDED"
    plan = make_plan(tmp_path)
    plan.write_text(f'priority = "interactive"\n{plan.read_text()}')
    imported = run_import(stack, make_catalog(tmp_path, [(f"I-{tmp_path.name}", "A lamp", "Bright")]),
                          load_plan(plan), catalog=f"cat-i-{tmp_path.name}")
    with db.transaction() as session:
        imported_ids = [t.id for t in queries.list_tasks(session, imported.import_id)]
    assert _classes(db, [gen.id]) == {PriorityClass.BULK}
    assert imported_ids and _classes(db, imported_ids) == {PriorityClass.INTERACTIVE}
