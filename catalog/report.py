"""The validation report: every issue with row, field, value, reason and action, as JSON and CSV.

The CSV's cells are spreadsheet-safe (catalog/csv_safe.py); the JSON keeps the values as read.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel

from catalog.csv_safe import safe_row
from catalog.records import Issue

COLUMNS = ("row", "product_id", "field", "value", "reason", "action")


def write_report(base: Path, summary: BaseModel, issues: Sequence[Issue]) -> tuple[Path, Path]:
    """Write `base`.json (summary + issues) and `base`.csv (issues); returns both paths."""
    base.parent.mkdir(parents=True, exist_ok=True)
    ordered = sorted(issues, key=lambda i: (i.row is None, i.row or 0, i.field))
    json_path, csv_path = base.with_suffix(".json"), base.with_suffix(".csv")
    body = {
        "summary": summary.model_dump(mode="json", exclude={"report", "report_csv"}),
        "issues": [i.model_dump(mode="json", include=set(COLUMNS)) for i in ordered],
    }
    json_path.write_text(json.dumps(body, indent=2, ensure_ascii=False), encoding="utf-8")
    with open(csv_path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for issue in ordered:
            writer.writerow(safe_row(issue.model_dump(mode="json", include=set(COLUMNS))))
    return json_path.resolve(), csv_path.resolve()
