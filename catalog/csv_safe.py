"""Cells for CSV files a person opens in a spreadsheet: values that would run as formulas are disarmed."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from contracts.tenant_text import leading_invisible

# OWASP "CSV injection": a cell starting with = + - @ (also their full-width forms, which some
# spreadsheets accept), a tab or a carriage return, also after leading white space or characters
# that show nothing (zero-width, bidi, BOM: `\u200b=HYPERLINK(...)`), is evaluated.
_FORMULA = re.compile(r"[=+\-@\uff1d\uff0b\uff0d\uff20]")


def spreadsheet_safe(value: Any) -> Any:
    """`value`, with a single quote in front when a spreadsheet would evaluate it; non-strings as they are."""
    if isinstance(value, str) and (value[:1] in ("\t", "\r") or _FORMULA.match(value, leading_invisible(value))):
        return "'" + value
    return value


def safe_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A csv.DictWriter row with every cell through `spreadsheet_safe` (the report and the export use it)."""
    return {key: spreadsheet_safe(value) for key, value in row.items()}
