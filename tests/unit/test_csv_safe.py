"""CSV output a spreadsheet opens: formula cells are disarmed in the report and the export; the reader
keeps what the catalog had (and never strips the quote that disarms a formula)."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from catalog.csv_safe import spreadsheet_safe
from catalog.readers import read_catalog
from catalog.readers.cells import clean_cell
from catalog.records import Issue, IssueAction
from catalog.report import write_report
from delivery.export import ExportRow, write_csv

HOSTILE = ['=HYPERLINK("http://x","y")', "@SUM(1+1)", "+1+2", "-2+3", "\t=1", "\r=1", "  =1+1", " @A1",
           "\uff1dSUM(1)"]


def evaluated(cell: str) -> bool:
    """What a spreadsheet runs as a formula (OWASP's list), written independently of the code under test."""
    stripped = cell.lstrip(" \t\r\n")
    return cell[:1] in ("\t", "\r") or stripped[:1] in ("=", "+", "-", "@", "\uff1d", "\uff0b", "\uff0d", "\uff20")


@pytest.mark.parametrize("value", HOSTILE)
def test_formula_cells_get_a_quote(value: str) -> None:
    assert spreadsheet_safe(value) == "'" + value and not evaluated(spreadsheet_safe(value))


@pytest.mark.parametrize("value", ["\u200b=HYPERLINK(\"http://x\",\"y\")", "\u202e=1+1", "\ufeff@SUM(1)",
                                   "\u200b \u2060+1", "\u200e-2+3", "\u00a0=1"])
def test_a_formula_behind_invisible_characters_gets_a_quote(value: str) -> None:
    """Issue 44.13: a zero-width, bidi or BOM character in front of `=` hid the formula from the check."""
    assert spreadsheet_safe(value) == "'" + value


@pytest.mark.parametrize("value", ["Lamp", "'quoted", "A-1", "x=1", "", "SKU-1", "\u200bLamp"])
def test_plain_cells_unchanged(value: str) -> None:
    assert spreadsheet_safe(value) == value


def test_non_strings_unchanged() -> None:
    assert spreadsheet_safe(-1) == -1 and spreadsheet_safe(None) is None and spreadsheet_safe(2.5) == 2.5


@given(st.text())
def test_no_text_stays_evaluable(value: str) -> None:
    out = spreadsheet_safe(value)
    assert out in (value, "'" + value) and not evaluated(out)


def _cells(path_or_text: Path | str) -> list[str]:
    text = path_or_text.read_text(encoding="utf-8") if isinstance(path_or_text, Path) else path_or_text
    return [cell for row in csv.reader(io.StringIO(text)) for cell in row]


class _Summary(BaseModel):
    status: str = "ACCEPTED"


def test_report_csv_disarms_values(tmp_path: Path) -> None:
    issues = [Issue(row=2, product_id="@SUM(1+1)", field="title", value='=HYPERLINK("http://x","y")',
                    reason="title too long", action=IssueAction.WARNING)]
    json_path, csv_path = write_report(tmp_path / "report", _Summary(), issues)
    cells = _cells(csv_path)
    assert "'@SUM(1+1)" in cells and """'=HYPERLINK("http://x","y")""" in cells
    assert not any(evaluated(c) for c in cells)
    assert '"=HYPERLINK' in json_path.read_text()  # the JSON report keeps the value as read


def test_export_csv_disarms_values() -> None:
    row = ExportRow(task_id="t1", product_id="@SUM(1+1)", locale="en-US", aspect_ratio="9:16", variant="-v",
                    template_id="+t", template_version="1", object_key="k", sha256="s", size_bytes=10,
                    duration_s=-1.0, width=None, height=None, urls_expire_at=datetime(2026, 1, 1, tzinfo=UTC))
    out = io.StringIO()
    assert write_csv(iter([row]), out) == 1
    cells = _cells(out.getvalue())
    assert "'@SUM(1+1)" in cells and "'-v" in cells and "'+t" in cells
    assert not any(evaluated(c) for c in cells[len(ExportRow.model_fields):] if c != "-1.0")  # numbers stay numbers


def test_reader_keeps_the_quote_that_disarms_a_formula() -> None:
    assert clean_cell("'=HYPERLINK(1)") == "'=HYPERLINK(1)"
    assert clean_cell("'@SUM(1+1)") == "'@SUM(1+1)" and clean_cell("'-1+A1") == "'-1+A1"
    assert clean_cell("'0042") == "0042" and clean_cell(" '-1.5 ") == "-1.5" and clean_cell("'+49 30") == "'+49 30"


def test_importer_reads_values_as_the_catalog_had_them(tmp_path: Path) -> None:
    catalog = tmp_path / "c.csv"
    catalog.write_text('product_id,title,description,image_url,price,currency,category\n'
                       '@SUM(1+1),"=HYPERLINK(""http://x"",""y"")",d,a.png,1.00,USD,Home\n'
                       "P-2,'=1+1,d,a.png,1.00,USD,Home\n")
    products = {p.product_id: p for p in read_catalog(catalog).products}
    assert products["@SUM(1+1)"].title == '=HYPERLINK("http://x","y")'
    assert products["P-2"].title == "'=1+1"
