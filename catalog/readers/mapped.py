"""A caller-supplied mapping (our field -> file header) for files no detector knows.

The mapping wins over detection. Fields it leaves out are still filled from a header that has the
field's own name (e.g. a "title" column), so a mapping only has to name what differs.
"""

from __future__ import annotations

from catalog.readers.cells import header_key
from catalog.readers.columns import REQUIRED, Format, Resolution, match_columns
from catalog.readers.errors import CatalogFormatError
from catalog.readers.flat import FIELDS, read_flat

NAME = "mapped"


def check_mapping(mapping: dict[str, str]) -> None:
    """Reject field names we do not have before looking at any file."""
    unknown = sorted(set(mapping) - set(FIELDS))
    if unknown:
        raise CatalogFormatError(
            f"mapping names unknown field(s) {', '.join(unknown)}; mappable fields: {', '.join(FIELDS)}",
            [],
            unknown,
        )


def resolve_mapping(headers: list[str], mapping: dict[str, str]) -> Resolution:
    aliases = {name: (header_key(mapping.get(name, name)),) for name in FIELDS}
    columns = match_columns(headers, aliases)
    absent = [name for name in mapping if name not in columns]  # mapped to a header not in the file
    missing = absent + [name for name in REQUIRED if name not in columns and name not in absent]
    return Resolution(NAME, columns, True, missing)


def mapped_format(mapping: dict[str, str]) -> Format:
    return Format(NAME, lambda headers: resolve_mapping(headers, mapping), read_flat)
