"""One row = one product: the shared reader behind the plain, Merchant Center, generic and mapped formats.

Those formats differ only in which header feeds which field, so they share this loop and each
declares its column aliases.
"""

from __future__ import annotations

from collections.abc import Iterator

from catalog.readers.cells import clean_text
from catalog.readers.columns import Columns
from catalog.readers.draft import ProductDraft
from catalog.readers.prices import is_currency_code
from catalog.readers.report import Report
from catalog.readers.source import RawRow
from catalog.records import IssueAction, ProductRecord

# Fields a flat format can fill; extra_images is a second image column (additional_image_link).
FIELDS = (
    "product_id",
    "title",
    "description",
    "image_url",
    "extra_images",
    "price",
    "currency",
    "category",
    "brand",
    "link",
)


def read_flat(
    rows: Iterator[RawRow], columns: Columns, report: Report, default_currency: str | None
) -> Iterator[ProductRecord]:
    for row in rows:
        product_id = columns.get(row, "product_id")
        report.scan_identifiers(row.cells, row.line, product_id)
        if not report.claim(product_id, row.line, columns.header("product_id")):
            continue
        draft = ProductDraft(product_id, row.line, report)
        draft.set_title(columns.get(row, "title"), row.line, columns.header("title"))
        draft.set_description(columns.get(row, "description"), row.line, columns.header("description"))
        draft.add_images(columns.get(row, "image_url"), row.line, columns.header("image_url"))
        draft.add_images(columns.get(row, "extra_images"), row.line, columns.header("extra_images"))
        currency = _row_currency(draft, row, columns) or default_currency
        draft.set_price(columns.get(row, "price"), row.line, columns.header("price"), currency)
        draft.category = clean_text(columns.get(row, "category"))
        draft.brand = clean_text(columns.get(row, "brand"))
        draft.set_link(columns.get(row, "link"), row.line, columns.header("link"))
        for i in columns.unused:
            draft.keep(columns.headers[i], row.cell(i))
        if record := draft.finish(columns.header("image_url")):
            yield record


def _row_currency(draft: ProductDraft, row: RawRow, columns: Columns) -> str | None:
    """The row's own currency column, when it holds an ISO code (else the caller's default)."""
    value = columns.get(row, "currency").upper()
    if value and not is_currency_code(value):
        reason = "not an ISO 4217 currency code; the default currency is used"
        header = columns.header("currency")
        draft.report.note(row.line, header, value, reason, IssueAction.REJECTED, draft.product_id)
        return None
    return value or None
