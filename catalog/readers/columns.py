"""Which file column feeds which product field: the only thing that differs between flat formats.

A format names, for each of our fields, the header keys (see `cells.header_key`) that can carry it,
in order of preference. Matching is case-insensitive and ignores spacing and BOMs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from catalog.readers.cells import header_key
from catalog.readers.report import Report
from catalog.readers.source import RawRow
from catalog.records import ProductRecord

REQUIRED = ("product_id", "title", "image_url")  # what every format must be able to fill


@dataclass(frozen=True)
class Columns:
    headers: list[str]
    index: dict[str, tuple[int, ...]]  # our field -> candidate column indices, preferred first

    def get(self, row: RawRow, name: str) -> str:
        """The first non-empty cleaned cell among the field's columns ('' if none)."""
        for i in self.index.get(name, ()):
            if value := row.cell(i):
                return value
        return ""

    def header(self, name: str) -> str:
        """The file's header for a field, for issue reports (falls back to our field name)."""
        indices = self.index.get(name)
        return self.headers[indices[0]] if indices else name

    def __contains__(self, name: object) -> bool:
        return name in self.index

    @cached_property
    def unused(self) -> tuple[int, ...]:
        """Columns no field reads: kept as product attributes."""
        used = {i for indices in self.index.values() for i in indices}
        return tuple(i for i in range(len(self.headers)) if i not in used)


@dataclass(frozen=True)
class Resolution:
    """How well a format fits a header row."""

    format: str
    columns: Columns
    signature: bool  # the headers that identify this format are present
    missing: list[str] = field(default_factory=list)  # required fields no column can fill

    @property
    def fits(self) -> bool:
        return self.signature and not self.missing


def match_columns(
    headers: list[str],
    aliases: Mapping[str, tuple[str, ...]],
    key: Callable[[str], str] = header_key,
) -> Columns:
    """Map each field to the present columns whose key is among its aliases, in alias order."""
    positions: dict[str, int] = {}
    for i, header in enumerate(headers):
        positions.setdefault(key(header), i)
    index = {name: tuple(positions[alias] for alias in names if alias in positions) for name, names in aliases.items()}
    return Columns(headers, {name: found for name, found in index.items() if found})


def resolve(
    format_name: str,
    headers: list[str],
    aliases: Mapping[str, tuple[str, ...]],
    signature: tuple[str, ...],
    *,
    any_of: tuple[str, ...] = (),
    key: Callable[[str], str] = header_key,
) -> Resolution:
    """Fit of a format identified by header keys that must all be present (plus one of `any_of`)."""
    columns = match_columns(headers, aliases, key)
    keys = {key(h) for h in headers}
    identified = all(s in keys for s in signature) and (not any_of or any(a in keys for a in any_of))
    missing = [name for name in REQUIRED if name not in columns]
    return Resolution(format_name, columns, identified, missing)


Reader = Callable[[Iterator[RawRow], Columns, Report, "str | None"], Iterator[ProductRecord]]


@dataclass(frozen=True)
class Format:
    """One export format: how to recognize its header row and how to turn its rows into products."""

    name: str
    resolve: Callable[[list[str]], Resolution]
    read: Reader
