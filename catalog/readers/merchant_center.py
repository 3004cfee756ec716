"""Google Merchant Center feeds (TSV or CSV) using the spec's attribute names.

Names are matched case-insensitively, with or without the `g:` namespace prefix, and with spaces
or underscores (Google's spreadsheet template writes "image link").
"""

from __future__ import annotations

from catalog.readers.cells import header_key
from catalog.readers.columns import Format, Resolution, resolve
from catalog.readers.flat import read_flat

NAME = "merchant_center"
_ALIASES = {
    "product_id": ("id",),
    "title": ("title",),
    "description": ("description",),
    "image_url": ("image_link",),
    "extra_images": ("additional_image_link",),
    "price": ("price",),
    "category": ("product_type", "google_product_category", "category"),
    "brand": ("brand",),
    "link": ("link",),
}
# id and title alone are too common to mean "feed"; one feed-only attribute must be there too.
_FEED_ATTRIBUTES = ("image_link", "link", "availability", "google_product_category", "gtin", "condition")


def _key(header: str) -> str:
    return header_key(header).removeprefix("g:").replace(" ", "_")


def _resolve(headers: list[str]) -> Resolution:
    return resolve(NAME, headers, _ALIASES, ("id", "title"), any_of=_FEED_ATTRIBUTES, key=_key)


FORMAT = Format(NAME, _resolve, read_flat)
