"""WooCommerce product exports (English or localized headers).

One row per product, except variations: they name their parent in `Parent` (by SKU or `id:123`)
and fold into it (images, first price, variant count) instead of becoming products. Because a
variation may come anywhere after its parent, variable parents are held until the end of the file;
every other product streams out at once. Memory is therefore bounded by the number of variable
products, not rows. Product id: the SKU, else `id:<ID>`.
"""

from __future__ import annotations

from collections.abc import Iterator

from catalog.readers.cells import clean_text, header_key
from catalog.readers.columns import Columns, Format, Resolution, resolve
from catalog.readers.draft import ProductDraft
from catalog.readers.report import Report
from catalog.readers.source import RawRow
from catalog.records import IssueAction, ProductRecord

NAME = "woocommerce"
# Localized export headers -> English ones (ru_RU, as written by the artur8800 shop export).
_LOCALIZED = {
    "тип": "type",
    "артикул": "sku",
    "имя": "name",
    "опубликован": "published",
    "рекомендуемый?": "is featured?",
    "видимость в каталоге": "visibility in catalog",
    "короткое описание": "short description",
    "описание": "description",
    "в наличии?": "in stock?",
    "базовая цена": "regular price",
    "категории": "categories",
    "изображения": "images",
}
_ALIASES = {
    "product_id": ("sku", "id"),  # for the required-field check and issue reports
    "sku": ("sku",),
    "woo_id": ("id",),
    "type": ("type",),
    "parent": ("parent",),
    "title": ("name",),
    "description": ("description", "short description"),
    "price": ("regular price",),
    "category": ("categories",),
    "image_url": ("images",),
}
_WOO_ONLY = ("regular price", "images", "parent", "published", "visibility in catalog")


def _key(header: str) -> str:
    key = header_key(header)
    return _LOCALIZED.get(key, key)


def _resolve(headers: list[str]) -> Resolution:
    return resolve(NAME, headers, _ALIASES, ("type", "name"), any_of=_WOO_ONLY, key=_key)


def read_woocommerce(
    rows: Iterator[RawRow], columns: Columns, report: Report, default_currency: str | None
) -> Iterator[ProductRecord]:
    held: dict[str, ProductDraft] = {}  # variable parents, until the end of the file
    refs: dict[str, str] = {}  # "woo-hoodie" / "id:45" -> product id of a held parent
    waiting: dict[str, list[RawRow]] = {}  # variations met before their parent
    for row in rows:
        types = {part.strip().lower() for part in columns.get(row, "type").split(",")}
        if "variation" in types:
            parent = columns.get(row, "parent")
            if parent in refs:
                _fold(held[refs[parent]], row, columns, default_currency)
            else:
                waiting.setdefault(parent, []).append(row)
            continue
        draft = _start(row, columns, report, default_currency)
        if draft is None:
            continue
        own_refs = [ref for ref in (columns.get(row, "sku"), _id_ref(columns.get(row, "woo_id"))) if ref]
        for ref in own_refs:
            for variation in waiting.pop(ref, []):
                _fold(draft, variation, columns, default_currency)
        if "variable" in types:
            held[draft.product_id] = draft
            refs.update(dict.fromkeys(own_refs, draft.product_id))
        elif record := draft.finish(columns.header("image_url")):
            yield record
    for draft in held.values():
        if record := draft.finish(columns.header("image_url")):
            yield record
    for parent, variations in waiting.items():
        for variation in variations:
            reason = f"variation's parent {parent!r} is not a variable product in this file; row skipped"
            report.note(variation.line, columns.header("parent"), parent, reason, IssueAction.ROW_INVALID)


def _id_ref(woo_id: str) -> str:
    return f"id:{woo_id}" if woo_id else ""


def _start(row: RawRow, columns: Columns, report: Report, default_currency: str | None) -> ProductDraft | None:
    """A product from its own row, or None when its id is empty or already taken."""
    product_id = columns.get(row, "sku") or _id_ref(columns.get(row, "woo_id"))
    report.scan_identifiers(row.cells, row.line, product_id)
    if not report.claim(product_id, row.line, columns.header("product_id")):
        return None
    draft = ProductDraft(product_id, row.line, report)
    draft.set_title(columns.get(row, "title"), row.line, columns.header("title"))
    description = columns.get(row, "description")
    draft.set_description(description, row.line, columns.header("description"), html_column=True)
    draft.add_images(columns.get(row, "image_url"), row.line, columns.header("image_url"))
    draft.set_price(columns.get(row, "price"), row.line, columns.header("price"), default_currency)
    draft.category = clean_text(columns.get(row, "category"))
    for i in columns.unused:
        draft.keep(columns.headers[i], row.cell(i))
    return draft


def _fold(draft: ProductDraft, row: RawRow, columns: Columns, default_currency: str | None) -> None:
    """A variation adds its row, images and (if the parent has none) its price to the parent."""
    draft.rows.append(row.line)
    draft.variants += 1
    draft.report.scan_identifiers(row.cells, row.line, draft.product_id)
    draft.add_images(columns.get(row, "image_url"), row.line, columns.header("image_url"), variant=True)
    draft.set_price(columns.get(row, "price"), row.line, columns.header("price"), default_currency)


FORMAT = Format(NAME, _resolve, read_woocommerce)
