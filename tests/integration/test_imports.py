"""Versioned imports on the real database and object storage: reuse, versions, supersedes, rejection."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from sqlalchemy import Text, cast, func, select, update
from sqlalchemy.exc import IntegrityError
from stack_helpers import make_catalog, make_plan

from adapters.storage import ObjectStorage
from catalog.importer import ImportRejected
from catalog.plan import load_plan
from catalog.service import UnknownImport, run_import
from schema.db import Database
from schema.models import CatalogImport, ImportTask, Task, ValidationIssue
from schema.queries import count_tasks, list_tasks

pytestmark = pytest.mark.integration

PRODUCTS = [("V-1", "Vase", "A vase"), ("V-2", "Bowl", "A bowl"), ("V-3", "Plate", "A plate")]


def _count(settings, model, **where) -> int:
    with Database(settings.database_url).transaction() as session:
        stmt = select(func.count()).select_from(model)
        for key, value in where.items():
            stmt = stmt.where(getattr(model, key) == value)
        return session.scalar(stmt)


def test_new_version_reuses_unchanged_tasks(stack, tmp_path):
    plan = load_plan(make_plan(tmp_path, ratios=("9:16", "16:9")))
    first = run_import(stack, make_catalog(tmp_path, PRODUCTS), plan, catalog="versions")
    assert (first.version, first.tasks, first.tasks_new, first.tasks_reused) == (1, 6, 6, 0)
    assert first.previous_import is None

    changed = [*PRODUCTS[:2], ("V-3", "Plate XL", "A bigger plate"), ("V-4", "Cup", "A cup")]
    second = run_import(stack, make_catalog(tmp_path / "v2", changed), plan, catalog="versions")
    assert second.import_id != first.import_id
    assert (second.version, second.previous_import) == (2, first.import_id)
    # V-1 and V-2 unchanged -> reused; V-3 changed title (prompt) -> new; V-4 new.
    assert (second.tasks, second.tasks_new, second.tasks_reused) == (8, 4, 4)
    assert _count(stack, ImportTask, import_id=second.import_id, reused=True) == 4
    assert _count(stack, ImportTask) == _count(stack, ImportTask, reused=True)  # links for reused tasks only
    assert _count(stack, Task, import_id=first.import_id) == 6
    with Database(stack.database_url).transaction() as session:
        # an import's tasks: those it created (tasks.import_id) and those it reused (import_tasks)
        assert count_tasks(session, first.import_id) == 6 and count_tasks(session, second.import_id) == 8
        created = session.scalars(select(Task).where(Task.import_id == second.import_id).limit(1)).one()
        reused = session.scalars(select(Task).join(ImportTask, ImportTask.task_id == Task.id)
                                 .where(ImportTask.import_id == second.import_id)).all()
        assert {t.import_id for t in reused} == {first.import_id}
        listed = {t.id for t in list_tasks(session, second.import_id)}
        assert len(listed) == 8 and {created.id, *(t.id for t in reused)} <= listed
        # the identity is stored as the canonical text its id was hashed from
        text = session.scalar(select(cast(Task.identity, Text)).where(Task.id == created.id))
        assert hashlib.sha256(text.encode()).hexdigest()[:32] == created.id
        assert created.identity["catalog"] == "versions"
        # one foreign key ties a task to its product, and through it to the import's tenant and plan
        with pytest.raises(IntegrityError), session.begin_nested():
            session.execute(update(Task).where(Task.id == created.id).values(tenant_id="another-tenant"))

    with Database(stack.database_url).transaction() as session:
        row = session.get(CatalogImport, second.import_id)
        assert row.previous_id == first.import_id and row.detected_format == "plain"
    raw = ObjectStorage.from_settings(stack).stat(row.raw_key)
    assert raw is not None and raw.sha256 == second.file_sha256


def test_same_file_is_the_same_import(stack, tmp_path):
    plan = load_plan(make_plan(tmp_path))
    catalog = make_catalog(tmp_path, PRODUCTS[:1])
    first = run_import(stack, catalog, plan, catalog="same")
    tasks_before = _count(stack, Task)
    again = run_import(stack, catalog, plan, catalog="same")
    assert again.import_id == first.import_id and again.already_imported
    assert (again.tasks_new, again.tasks_reused) == (0, first.tasks)
    assert _count(stack, Task) == tasks_before
    assert _count(stack, CatalogImport, catalog="same") == 1


def test_duplicate_id_stops_the_import_and_a_corrected_file_supersedes_it(stack, tmp_path):
    plan = load_plan(make_plan(tmp_path))
    bad = make_catalog(tmp_path / "bad", [("D-1", "One", "x"), ("D-1", "Two", "y"), ("D-2", "Three", "z")])
    with pytest.raises(ImportRejected) as rejected:
        run_import(stack, bad, plan, catalog="dupes")
    summary = rejected.value.summary
    assert summary.status == "REJECTED" and summary.tasks == 0
    assert _count(stack, Task, import_id=summary.import_id) == 0
    assert _count(stack, ValidationIssue, import_id=summary.import_id, action="stop_import") >= 1
    report = json.loads(Path(summary.report).read_text())
    stop = [i for i in report["issues"] if i["action"] == "stop_import"]
    assert stop and stop[0]["field"] == "product_id" and stop[0]["value"] == "D-1" and stop[0]["row"] == 3
    csv_text = Path(summary.report_csv).read_text()
    assert csv_text.splitlines()[0] == "row,product_id,field,value,reason,action" and "stop_import" in csv_text

    good = make_catalog(tmp_path / "good", [("D-1", "One", "x"), ("D-2", "Three", "z")])
    fixed = run_import(stack, good, plan, catalog="dupes", supersedes=summary.import_id)
    assert fixed.status == "ACCEPTED" and fixed.supersedes == summary.import_id and fixed.tasks == 2
    with Database(stack.database_url).transaction() as session:
        assert session.get(CatalogImport, fixed.import_id).supersedes_id == summary.import_id

    with pytest.raises(UnknownImport):
        run_import(stack, good, plan, catalog="other", supersedes="imp_does_not_exist")


def test_row_level_problems_make_no_tasks_but_do_not_stop_the_import(stack, tmp_path):
    plan = load_plan(make_plan(tmp_path))
    catalog = make_catalog(tmp_path, [("M-1", "Fine", "ok")])
    catalog.write_text(catalog.read_text() + "M-2,No picture,none,,5.00,USD,Home\n"
                       + "M-3,Missing file,none,images/nope.png,5.00,USD,Home\n"
                       + f"M-4,{'Long title ' * 10},none,images/aurora-lamp.png,5.00,USD,Home\n")
    summary = run_import(stack, catalog, plan, catalog="rows")
    assert summary.status == "ACCEPTED" and summary.products == 4 and summary.tasks == 1
    assert summary.issues_by_action.get("row_invalid") == 1
    assert summary.issues_by_action.get("human_review") == 1
    assert summary.issues_by_action.get("copy_review") == 1
