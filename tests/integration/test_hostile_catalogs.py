"""Hostile catalogs through the real CLI and stack: formula cells disarmed in the report and export CSVs
(and kept as the catalog had them for prompts), image rows that are not images invalid, nothing stored."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from cli_helpers import run_cli_async
from sqlalchemy import select
from stack_helpers import make_catalog, make_plan

from adapters.storage import ObjectStorage
from schema.db import Database
from schema.models import Product, Task

pytestmark = pytest.mark.integration

HYPERLINK = '=HYPERLINK("http://x","y")'


def evaluated(cell: str) -> bool:
    """A cell a spreadsheet runs as a formula (OWASP's list)."""
    return cell[:1] in ("\t", "\r") or cell.lstrip(" \t\r\n")[:1] in ("=", "+", "-", "@")


def csv_cells(path: Path) -> list[str]:
    with path.open(newline="", encoding="utf-8") as handle:
        return [cell for row in csv.reader(handle) for cell in row]


async def test_formula_cells_are_disarmed_in_the_report_and_the_export(stack, task_queue, tmp_path, monkeypatch):
    quoted = '"' + HYPERLINK.replace('"', '""') + '"'
    catalog = make_catalog(tmp_path, [("@SUM(1+1)", quoted, "A lamp"),
                                      ("=1+2", quoted[:-1] + " " + "very long " * 12 + '"', "A lamp")])
    plan = make_plan(tmp_path, duration_s=1)
    imported = await run_cli_async("import", str(catalog), "--plan", str(plan), "--json")
    assert imported.code == 0, imported.stdout + imported.stderr
    summary = imported.json
    assert summary["tasks"] == 1  # the second product's title is too long: a report issue, no task
    report_cells = csv_cells(Path(summary["report_csv"]))
    assert "'=1+2" in report_cells and any(c.startswith("'" + HYPERLINK) for c in report_cells)
    assert not any(evaluated(c) for c in report_cells)

    monkeypatch.setenv("REELQUEUE_TASK_QUEUE", task_queue)
    ran = await run_cli_async("run", summary["import_id"], "--wait", "--timeout", "300", "--json")
    assert ran.code == 0 and ran.json["by_status"] == {"SUCCEEDED": 1}, ran.stdout
    out = tmp_path / "videos.csv"
    exported = await run_cli_async("export", summary["import_id"], "--format", "csv", "--out", str(out))
    assert exported.code == 0, exported.stderr
    export_cells = csv_cells(out)
    assert "'@SUM(1+1)" in export_cells and not any(evaluated(c) for c in export_cells)
    with Database(stack.database_url).transaction() as session:  # prompts and overlays as the catalog had them
        task = session.scalars(select(Task).where(Task.import_id == summary["import_id"])).one()
        assert task.product_id == "@SUM(1+1)" and HYPERLINK in task.prompt


async def test_images_that_are_not_images_make_rows_invalid_and_store_nothing(stack, tmp_path, hostile_image_catalog):
    storage = ObjectStorage.from_settings(stack)
    before = {o.key for o in storage.list_objects(f"tenants/{stack.tenant}/images/")}
    result = await run_cli_async("import", str(hostile_image_catalog), "--plan", str(make_plan(tmp_path)), "--json")
    assert result.code == 0, result.stdout + result.stderr
    summary = result.json
    assert (summary["tasks"], summary["invalid_rows"]) == (1, 3)
    issues = {i["product_id"]: i for i in json.loads(Path(summary["report"]).read_text())["issues"]}
    for pid, reason in {"HTML-1": "not an image", "BOMB-1": "image too large",
                        "DOT-1": "must stay inside the catalog's folder"}.items():
        assert (issues[pid]["action"], issues[pid]["field"]) == ("row_invalid", "image_url")
        assert reason in issues[pid]["reason"]
    with Database(stack.database_url).transaction() as session:
        products = {p.product_id: p for p in session.scalars(
            select(Product).where(Product.import_id == summary["import_id"]))}
        assert products["OK-1"].image_asset_id is not None
        assert all(products.get(pid) is None or products[pid].image_asset_id is None
                   for pid in ("HTML-1", "BOMB-1", "DOT-1"))
    new = [o.key for o in storage.list_objects(f"tenants/{stack.tenant}/images/") if o.key not in before]
    assert len(new) <= 1 and all(key.endswith(".png") for key in new)  # at most the good image, re-encoded
    for key in new:
        assert storage.read_bytes(key).startswith(b"\x89PNG")
