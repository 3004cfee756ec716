"""An import with URL checks off is one stream in one transaction (catalog/importer.py `_streamed`):
rows reach the server while the file is still being read, a failure leaves nothing, and a file
that needs the two phases (a local image to store, a stop-the-import issue) gets them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sqlalchemy import func, select
from stack_helpers import EXAMPLES, make_plan

import catalog.importer as importer
from adapters.storage import file_sha256
from catalog.importer import ImportRejected, import_id_for
from catalog.plan import load_plan
from catalog.service import run_import
from schema.db import Database
from schema.models import CatalogImport, Product, Task, ValidationIssue

pytestmark = pytest.mark.integration


def _catalog(folder: Path, count: int, *extra: str) -> Path:
    """`count` products with image URLs (not fetched with URL checks off), then `extra` lines."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["product_id,title,description,image_url,price,currency,category"]
    lines += [f"S-{i},Item {i},Thing {i},https://cdn.example.com/p/{i}.jpg,9.99,USD,Home" for i in range(count)]
    path = folder / "catalog.csv"
    path.write_text("\n".join([*lines, *extra]) + "\n")
    return path


def _count(settings, stmt) -> int:  # noqa: ANN001
    with Database(settings.database_url).transaction() as session:
        return session.scalar(stmt)


def _record_order(monkeypatch: pytest.MonkeyPatch, events: list[str], fail_at_copy: int | None = None) -> None:
    """Note "read" per product the reader hands out and "copy" per COPY of tasks (optionally failing)."""
    monkeypatch.setattr(importer, "BATCH", 2)
    real_read, real_insert = importer.read_catalog, importer.insert_tasks

    def read(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        opened = real_read(*args, **kwargs)
        products = opened.products

        def counted():  # noqa: ANN202
            for product in products:
                events.append("read")
                yield product

        opened.products = counted()
        return opened

    def insert(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        events.append("copy")
        if events.count("copy") == fail_at_copy:
            raise RuntimeError("the server went away")
        return real_insert(*args, **kwargs)

    monkeypatch.setattr(importer, "read_catalog", read)
    monkeypatch.setattr(importer, "insert_tasks", insert)


def test_rows_reach_the_server_while_the_file_is_read(stack, tmp_path, monkeypatch):
    events: list[str] = []
    _record_order(monkeypatch, events)
    plan = load_plan(make_plan(tmp_path))
    summary = run_import(stack, _catalog(tmp_path, 10), plan, catalog="streamed", check_urls=False)
    assert (summary.status, summary.rows, summary.products, summary.tasks, summary.tasks_new) == (
        "ACCEPTED", 10, 10, 10, 10)
    assert "read" in events[events.index("copy"):], events  # the first COPY came before the last product
    with Database(stack.database_url).transaction() as session:
        row = session.get(CatalogImport, summary.import_id)
        assert (row.status, row.rows, row.products, row.invalid_rows, row.tasks, row.detected_format) == (
            "ACCEPTED", 10, 10, 0, 10, "plain")
        assert row.version == 1 and row.report_key == summary.report and Path(summary.report).exists()
    again = run_import(stack, _catalog(tmp_path, 10), plan, catalog="streamed", check_urls=False)
    assert again.already_imported and again.import_id == summary.import_id


def test_a_failure_while_streaming_leaves_no_rows(stack, tmp_path, monkeypatch):
    events: list[str] = []
    _record_order(monkeypatch, events, fail_at_copy=3)
    plan = load_plan(make_plan(tmp_path))
    path = _catalog(tmp_path, 10)
    with pytest.raises(RuntimeError, match="went away"):
        run_import(stack, path, plan, catalog="halfway", check_urls=False)
    assert events.count("copy") == 3  # two batches were written before the failure
    import_id = import_id_for(stack.tenant, "halfway", file_sha256(path)[0], plan.plan_id)
    assert _count(stack, select(func.count()).select_from(CatalogImport).where(CatalogImport.catalog == "halfway")) == 0
    assert _count(stack, select(func.count()).select_from(Product).where(Product.import_id == import_id)) == 0
    assert _count(stack, select(func.count()).select_from(Task).where(Task.import_id == import_id)) == 0

    monkeypatch.undo()
    done = run_import(stack, path, plan, catalog="halfway", check_urls=False)
    assert (done.import_id, done.version, done.tasks_new) == (import_id, 1, 10)


def test_a_local_image_is_stored_by_the_two_phase_import(stack, tmp_path):
    folder = tmp_path / "local"
    (folder / "images").mkdir(parents=True)
    shutil.copy(EXAMPLES / "images" / "aurora-lamp.png", folder / "images" / "aurora-lamp.png")
    path = _catalog(folder, 5, "L-1,Lamp,A lamp,images/aurora-lamp.png,49.00,USD,Home")
    summary = run_import(stack, path, load_plan(make_plan(tmp_path)), catalog="local-image", check_urls=False)
    assert (summary.status, summary.products, summary.tasks, summary.tasks_new) == ("ACCEPTED", 6, 6, 6)
    with Database(stack.database_url).transaction() as session:
        lamp = session.scalars(select(Task).where(Task.import_id == summary.import_id,
                                                  Task.product_id == "L-1")).one()
        assert lamp.image_asset_id is not None
        assert session.scalar(select(func.count()).select_from(CatalogImport)
                              .where(CatalogImport.catalog == "local-image")) == 1


def test_a_duplicate_id_late_in_the_file_rejects_the_import(stack, tmp_path):
    path = _catalog(tmp_path, 6, "S-2,Again,Twice,https://cdn.example.com/p/2.jpg,9.99,USD,Home")
    with pytest.raises(ImportRejected) as rejected:
        run_import(stack, path, load_plan(make_plan(tmp_path)), catalog="late-dupe", check_urls=False)
    summary = rejected.value.summary
    assert (summary.status, summary.tasks) == ("REJECTED", 0)
    with Database(stack.database_url).transaction() as session:
        assert session.get(CatalogImport, summary.import_id).status == "REJECTED"
        assert session.scalar(select(func.count()).select_from(Task).where(Task.import_id == summary.import_id)) == 0
        assert session.scalar(select(func.count()).select_from(ValidationIssue).where(
            ValidationIssue.import_id == summary.import_id, ValidationIssue.action == "stop_import")) >= 1
