"""Our own simple layout: product_id,title,description,image_url,price,currency,category."""

from __future__ import annotations

from catalog.readers.columns import Format, Resolution, resolve
from catalog.readers.flat import read_flat

NAME = "plain"
_ALIASES = {
    name: (name,) for name in ("product_id", "title", "description", "image_url", "price", "currency", "category")
}


def _resolve(headers: list[str]) -> Resolution:
    return resolve(NAME, headers, _ALIASES, ("product_id",))


FORMAT = Format(NAME, _resolve, read_flat)
