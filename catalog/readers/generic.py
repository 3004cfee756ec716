"""Last-resort detection: any one-row-per-product file whose headers are common product words.

Tried only after every platform format failed. Each field has a small, explicit list of synonyms,
matched case-insensitively with `_`, `-` and spaces treated alike ("Item-ID" = "item id"). A field
takes exactly one column, the first synonym present: mixing two columns per row (an "ID" here, a
"SKU" there) would make products unstable. Other columns are kept as attributes.

Matches are guesses, so when a column other than the one named after our field is used, one
WARNING issue (row None, field "(header)") lists which header was taken for which field.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from catalog.readers.cells import header_key
from catalog.readers.columns import REQUIRED, Columns, Format, Resolution
from catalog.readers.flat import read_flat
from catalog.readers.report import Report
from catalog.readers.source import RawRow
from catalog.records import IssueAction, ProductRecord

NAME = "generic"
HEADER_FIELD = "(header)"
# Our field -> synonyms, preferred first. "sale price" comes last so that it is only used when the
# file has no regular price column.
SYNONYMS: dict[str, tuple[str, ...]] = {
    "product_id": ("product id", "id", "sku", "item id", "handle"),
    "title": ("title", "name", "product name"),
    "image_url": ("image url", "image", "image link", "picture", "photo", "main image"),
    "price": ("price", "regular price", "amount", "sale price"),
    "currency": ("currency",),
    "description": ("description", "body", "details"),
    "category": ("category", "product type"),
    "link": ("link", "url", "product url"),
    "brand": ("brand",),
}
_SEPARATORS = re.compile(r"[\s_-]+")


def generic_key(header: str) -> str:
    """Header comparison form: case folded, runs of `_`, `-` and whitespace as one space."""
    return _SEPARATORS.sub(" ", header_key(header)).strip()


def resolve_generic(headers: list[str]) -> Resolution:
    positions: dict[str, int] = {}
    for i, header in enumerate(headers):
        positions.setdefault(generic_key(header), i)
    index: dict[str, tuple[int, ...]] = {}
    for name, synonyms in SYNONYMS.items():
        found = next((positions[s] for s in synonyms if s in positions), None)
        if found is not None:
            index[name] = (found,)
    missing = [name for name in REQUIRED if name not in index]
    # No header identifies "generic": it counts as recognized only when it can fill every required
    # field, so an identified-but-incomplete platform format stays the "closest" in error messages.
    return Resolution(NAME, Columns(headers, index), not missing, missing)


def guessed(columns: Columns) -> list[tuple[str, str]]:
    """(header, field) for each field filled from a column not named after the field itself."""
    return [
        (columns.headers[indices[0]], name)
        for name, indices in columns.index.items()
        if generic_key(columns.headers[indices[0]]) != generic_key(name)
    ]


def read_generic(
    rows: Iterator[RawRow], columns: Columns, report: Report, default_currency: str | None
) -> Iterator[ProductRecord]:
    """Note the guessed columns at once (not on first iteration), then read one row per product."""
    if guesses := guessed(columns):
        taken = ", ".join(f"{header!r} as {name}" for header, name in guesses)
        reason = f"no known catalog format matched; columns guessed from their names: {taken}. Check these guesses"
        report.note(None, HEADER_FIELD, ", ".join(header for header, _ in guesses), reason, IssueAction.WARNING)
    return read_flat(rows, columns, report, default_currency)


FORMAT = Format(NAME, resolve_generic, read_generic)
