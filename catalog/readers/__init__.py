"""Catalog readers: a product file in, normalized `ProductRecord`s and validation `Issue`s out.

Pure (no DB, no network) and streaming: `read_catalog` reads only the header row eagerly; products
come from a generator that reads the file record by record. `CatalogRead.issues` is a list that
fills while `products` is iterated, and the counters (`rows`, `products_seen`, `products_emitted`)
grow the same way: they are final once `products` is exhausted.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from catalog.readers import generic, merchant_center, plain, shopify, woocommerce
from catalog.readers.columns import Format, Resolution
from catalog.readers.errors import CatalogFormatError
from catalog.readers.mapped import check_mapping, mapped_format
from catalog.readers.report import Report
from catalog.readers.source import detect_encoding, iter_records, locate_header
from catalog.records import Issue, IssueAction, ProductRecord

__all__ = ["FORMATS", "CatalogFormatError", "CatalogRead", "read_catalog"]

# Detection order; each format's header signature is distinct, so order only breaks odd ties.
# `generic` (header synonyms, no signature of its own) must stay last: on a tie the earlier format
# wins, so it is only used when no platform format fits.
FORMATS: tuple[Format, ...] = (
    shopify.LEGACY,
    shopify.MODERN,
    woocommerce.FORMAT,
    merchant_center.FORMAT,
    plain.FORMAT,
    generic.FORMAT,
)


@dataclass
class CatalogRead:
    """One read of a catalog file. `products` is a one-shot iterator of the valid products."""

    path: Path
    format: str  # plain | shopify_legacy | shopify_2025 | woocommerce | merchant_center | generic | mapped
    headers: list[str]
    header_line: int  # physical line of the header row (after any junk lines)
    encoding: str
    delimiter: str
    products: Iterator[ProductRecord]
    report: Report = field(repr=False)

    @property
    def issues(self) -> list[Issue]:
        return self.report.issues

    @property
    def rows(self) -> int:
        """Data records read so far (blank lines excluded, ragged records included)."""
        return self.report.rows

    @property
    def products_seen(self) -> int:
        """Distinct non-empty product ids met so far, valid or not."""
        return self.report.products_seen

    @property
    def products_emitted(self) -> int:
        """Valid products yielded so far (no STOP_IMPORT/ROW_INVALID problem of their own)."""
        return self.report.products_emitted

    @property
    def stop_import(self) -> bool:
        """An empty or duplicated product id was found: nothing from this file may be expanded."""
        return self.report.stop_import


def read_catalog(
    path: Path, *, mapping: dict[str, str] | None = None, default_currency: str | None = None
) -> CatalogRead:
    """Open a catalog: find its header, pick the format (a non-empty mapping wins over detection).

    Raises CatalogFormatError when no format and no mapping fits the header row.
    """
    path = Path(path)
    if mapping:
        check_mapping(mapping)
        candidates: tuple[Format, ...] = (mapped_format(mapping),)
    else:
        candidates = FORMATS
    encoding = detect_encoding(path)
    layout = locate_header(path, encoding, lambda headers: _best(candidates, headers)[1].fits)
    chosen, resolution = _best(candidates, layout.headers)
    if not resolution.fits:
        raise _format_error(resolution, layout.headers, layout.header_line, mapped=bool(mapping))
    report = Report(layout.headers)
    if encoding == "cp1252":
        report.note(None, "(file)", "", "not valid UTF-8: decoded as Windows-1252", IssueAction.WARNING)
    if layout.junk_lines:
        reason = f"{layout.junk_lines} non-empty line(s) before the header were skipped"
        report.note(layout.header_line, "(file)", "", reason, IssueAction.WARNING)
    records = iter_records(path, layout, report)
    products = chosen.read(records, resolution.columns, report, default_currency)
    return CatalogRead(
        path, chosen.name, layout.headers, layout.header_line, encoding, layout.delimiter, products, report
    )


def _best(candidates: tuple[Format, ...], headers: list[str]) -> tuple[Format, Resolution]:
    """The fitting format, else the closest one (identified by its signature, fewest fields missing)."""
    fits = [(f, f.resolve(headers)) for f in candidates]
    return min(fits, key=lambda pair: (not pair[1].fits, not pair[1].signature, len(pair[1].missing)))


def _format_error(resolution: Resolution, headers: list[str], line: int, *, mapped: bool) -> CatalogFormatError:
    missing = resolution.missing
    found = ", ".join(repr(h) for h in headers)
    if mapped:
        what = "the mapping does not fit this file"
    else:
        what = f"no known catalog format matches (closest: {resolution.format})"
    message = (
        f"{what}. Headers found (line {line}): {found}. Fields still missing: {', '.join(missing)}. "
        'Pass a mapping of field -> header, e.g. {"product_id": "<header>", "image_url": "<header>"}.'
    )
    return CatalogFormatError(message, list(headers), list(missing))
