"""Shopify product CSVs: the legacy header (Handle, Body (HTML), Variant Price, Image Src, ...)
and the 2025 header (URL handle, Description, Price, Product image URL, ...).

A product spans consecutive rows with the same handle: the first carries the product fields,
the rest add variants and images. The handle is the product id (exported SKUs are usually empty).
Shopify exports carry no currency, so prices take the caller's default.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import chain, groupby

from catalog.readers.cells import clean_text, header_key
from catalog.readers.columns import Columns, Format, Resolution, resolve
from catalog.readers.draft import ProductDraft
from catalog.readers.report import Report
from catalog.readers.source import RawRow
from catalog.records import ProductRecord

_LEGACY = {
    "product_id": ("handle",),
    "title": ("title",),
    "description": ("body (html)",),
    "brand": ("vendor",),
    "category": ("product category", "type"),
    "price": ("variant price",),
    "image_url": ("image src",),
    "variant_image": ("variant image",),
}
_MODERN = {
    "product_id": ("url handle",),
    "title": ("title",),
    "description": ("description",),
    "brand": ("vendor",),
    "category": ("product category", "type"),
    "price": ("price",),
    "image_url": ("product image url",),
    "variant_image": ("variant image url",),
}

# Columns that describe one variant or one image, not the product: not kept as product attributes.
_VARIANT_LEVEL = re.compile(
    r"^(variant |option\d value|image |sku$|barcode$|compare|cost per item|charge tax|tax code|inventory "
    r"|continue selling|weight |requires shipping|fulfillment service|unit price|included / |price / "
    r"|google shopping / (mpn|manufacturer part number))"
)


def read_shopify(
    rows: Iterator[RawRow], columns: Columns, report: Report, default_currency: str | None
) -> Iterator[ProductRecord]:
    for handle, group in groupby(rows, key=lambda row: columns.get(row, "product_id")):
        first = next(group)
        if not report.claim(handle, first.line, columns.header("product_id")):
            continue
        draft = ProductDraft(handle, first.line, report)
        if not columns.get(first, "title"):
            reason = "first row of the handle has no Title: the product row is missing or was rejected"
            draft.reject(first.line, columns.header("title"), "", reason)
        draft.set_title(columns.get(first, "title"), first.line, columns.header("title"))
        description = columns.get(first, "description")
        draft.set_description(description, first.line, columns.header("description"), html_column=True)
        draft.brand = clean_text(columns.get(first, "brand"))
        draft.category = clean_text(columns.get(first, "category"))
        for i in columns.unused:
            if not _VARIANT_LEVEL.match(header_key(columns.headers[i])):
                draft.keep(columns.headers[i], first.cell(i))
        for row in chain([first], group):
            _add_row(draft, row, columns, default_currency)
        if record := draft.finish(columns.header("image_url")):
            yield record


def _add_row(draft: ProductDraft, row: RawRow, columns: Columns, default_currency: str | None) -> None:
    """What every row of a product contributes: images, a variant, maybe the price."""
    if row.line != draft.row:
        draft.rows.append(row.line)
    draft.report.scan_identifiers(row.cells, row.line, draft.product_id)
    draft.add_images(columns.get(row, "image_url"), row.line, columns.header("image_url"))
    variant_image = columns.get(row, "variant_image")
    draft.add_images(variant_image, row.line, columns.header("variant_image"), variant=True)
    price = columns.get(row, "price")
    draft.variants += bool(price)
    draft.set_price(price, row.line, columns.header("price"), default_currency)


def _resolve_legacy(headers: list[str]) -> Resolution:
    return resolve("shopify_legacy", headers, _LEGACY, ("handle",))


def _resolve_modern(headers: list[str]) -> Resolution:
    return resolve("shopify_2025", headers, _MODERN, ("url handle",))


LEGACY = Format("shopify_legacy", _resolve_legacy, read_shopify)
MODERN = Format("shopify_2025", _resolve_modern, read_shopify)
