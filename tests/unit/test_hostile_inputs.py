"""Hostile catalogs and plans through the real CLI (dry run, no stack): exit 2 with a message for a file
that cannot be read, an invalid row with its reason for each image that is not one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HEADER = "product_id,title,description,image_url,price,currency,category\n"


@pytest.mark.parametrize("nested", ["[" * 5000 + "]" * 5000, "{b = " * 5000 + "1" + "}" * 5000])
def test_a_deeply_nested_plan_exits_2_with_a_message(cli, tmp_path, nested: str) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text((EXAMPLES / "plan.toml").read_text() + f"\nx = {nested}\n")
    result = cli("import", str(EXAMPLES / "catalog.csv"), "--plan", str(plan), "--dry-run")
    assert result.exit_code == 2, result.output
    assert "nests arrays or tables too deeply" in result.output and not isinstance(result.exception, RecursionError)


def test_a_128_kib_header_line_exits_2_with_a_message(cli, tmp_path) -> None:
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(HEADER.rstrip("\n") + "," + "x" * (128 * 1024) + "\nP-1,t,d,a.png,1.00,USD,Home\n")
    result = cli("import", str(catalog), "--plan", str(EXAMPLES / "plan.toml"), "--dry-run", "--json")
    assert result.exit_code == 2, result.output
    assert "line 1 is longer than 65536 characters" in json.loads(result.stdout)["error"]


def test_images_that_are_not_images_make_their_rows_invalid(cli, hostile_image_catalog) -> None:
    result = cli("import", str(hostile_image_catalog), "--plan", str(EXAMPLES / "plan.toml"), "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    issues = {i["product_id"]: i for i in json.loads(Path(summary["report"]).read_text())["issues"]}
    assert "OK-1" not in issues and summary["invalid_rows"] == 3
    expected = {"HTML-1": "not an image", "BOMB-1": "image too large",
                "DOT-1": "must stay inside the catalog's folder"}
    for pid, reason in expected.items():
        issue = issues[pid]
        assert (issue["field"], issue["action"]) == ("image_url", "row_invalid") and reason in issue["reason"], issue
        assert issue["row"] is not None and issue["value"]
    assert "s3cr3t" not in Path(summary["report"]).read_text()
