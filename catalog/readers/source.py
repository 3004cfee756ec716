"""From bytes on disk to well-formed records, streaming, with physical line numbers.

Real exports arrive with BOMs (sometimes after junk lines), junk before the header, CRLF, quoted
multi-line cells, TSV or CSV, and rows with too many or too few fields. This module absorbs all of
that once, so format readers only ever see records that have exactly one cell per header.
"""

from __future__ import annotations

import codecs
import csv
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from catalog.readers.cells import clean_cell
from catalog.readers.errors import CatalogFormatError
from catalog.readers.report import Report
from contracts.tenant_text import first_unsafe

PREAMBLE_LIMIT = 50  # the header must start within this many lines
HEADER_LINE_LIMIT = 64 * 1024  # characters; a preamble line longer than this is not a catalog's
_DELIMITERS = (",", "\t", ";", "|")
_SEP_DIRECTIVE = re.compile(r"sep=(.)")  # Excel's "sep=;" first line
_FIELD_LIMIT = 64 * 1024 * 1024  # csv's default (128 KiB) is smaller than some HTML bodies


@dataclass(frozen=True)
class RawRow:
    line: int  # physical line number (1-based) of the record's first line
    cells: list[str]

    def cell(self, index: int) -> str:
        return clean_cell(self.cells[index])


@dataclass(frozen=True)
class Layout:
    """How to read the data part of a file; found once, before any record is read."""

    encoding: str
    header_line: int  # physical line of the header row
    delimiter: str
    headers: list[str]
    junk_lines: int  # non-blank lines skipped before the header


def detect_encoding(path: Path) -> str:
    """UTF-8 (BOM or not) or UTF-16 with BOM; anything else is read as cp1252 (Excel's default).

    Checks the whole file in chunks so a bad byte near the end is found before reading starts.
    """
    with path.open("rb") as handle:
        if handle.read(2) in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE):
            return "utf-16"
        handle.seek(0)
        decoder = codecs.getincrementaldecoder("utf-8")()
        try:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                decoder.decode(chunk)
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            return "cp1252"
    return "utf-8"


def locate_header(path: Path, encoding: str, accept: Callable[[list[str]], bool]) -> Layout:
    """The header is the first line with >= 3 non-empty cells that `accept` recognizes.

    Junk lines such as "Exported 2024-01-01, shop, admin" can also have three cells, so a line
    that no reader recognizes is only used when no later line in the preamble is recognized.
    """
    first: Layout | None = None
    forced: str | None = None
    junk = 0
    with path.open(encoding=encoding, errors="replace", newline="") as handle:
        for number in range(1, PREAMBLE_LIMIT + 1):
            line = handle.readline(HEADER_LINE_LIMIT + 1)
            if not line:
                break
            if len(line) > HEADER_LINE_LIMIT:
                raise CatalogFormatError(
                    f"line {number} is longer than {HEADER_LINE_LIMIT} characters: no header row is that long",
                    [], [])
            text = line.replace("\ufeff", "").rstrip("\r\n")
            if directive := _SEP_DIRECTIVE.fullmatch(text.strip()):
                forced = directive[1]
                continue
            delimiter = forced or sniff_delimiter(text)
            headers = [clean_cell(cell) for cell in next(csv.reader([text], delimiter=delimiter), [])]
            if sum(1 for header in headers if header) >= 3:
                layout = Layout(encoding, number, delimiter, headers, junk)
                if accept(headers):
                    return _plain_headers(layout)
                first = first or layout
            if text.strip():
                junk += 1
    if first is None:
        raise CatalogFormatError(
            f"no header row (a line with at least 3 column names) in the first {PREAMBLE_LIMIT} lines",
            [],
            [],
        )
    return _plain_headers(first)


def _plain_headers(layout: Layout) -> Layout:
    """The header row holds the names of products' attributes and issues' fields: text, as the rows."""
    if refused := first_unsafe("\n".join(layout.headers)):
        raise CatalogFormatError(f"the header row (line {layout.header_line}): {_not_text(refused)}", [], [])
    return layout


def sniff_delimiter(line: str) -> str:
    """The delimiter that splits the header line into the most cells (comma on a tie)."""
    return max(_DELIMITERS, key=lambda d: len(next(csv.reader([line], delimiter=d), [])))


class _CountingLines:
    """Line iterator that knows how many physical lines csv has pulled so far."""

    def __init__(self, lines: Iterator[str]) -> None:
        self._lines = lines
        self.count = 0

    def __iter__(self) -> _CountingLines:
        return self

    def __next__(self) -> str:
        line = next(self._lines)
        self.count += 1
        return line


def iter_records(path: Path, layout: Layout, report: Report) -> Iterator[RawRow]:
    """Data records after the header; blank ones skipped, ragged ones reported and dropped.

    A ragged record (more or fewer cells than the header) is never "fixed" by shifting cells:
    which cell moved is unknowable, and a shifted price or image URL is worse than none.
    """
    csv.field_size_limit(max(csv.field_size_limit(), _FIELD_LIMIT))
    width = len(layout.headers)
    with path.open(encoding=layout.encoding, errors="replace", newline="") as handle:
        lines = _CountingLines(iter(handle))
        for _ in range(layout.header_line):
            next(lines, None)
        reader = csv.reader(lines, delimiter=layout.delimiter)
        while True:
            start = lines.count + 1
            try:
                cells = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                report.rows += 1
                report.reject_row(start, "", f"unreadable record: {exc}")
                continue
            if not any(cell.strip() for cell in cells):
                continue
            report.rows += 1
            if refused := first_unsafe("\n".join(cells)):  # the rule for tenant text: Postgres refuses a NUL,
                report.reject_row(start, "", _not_text(refused))  # a terminal obeys ESC, a page U+202E
                continue
            if len(cells) != width:
                reason = f"expected {width} fields as in the header, got {len(cells)}"
                report.reject_row(start, layout.delimiter.join(cells), reason)
                continue
            yield RawRow(start, cells)


def _not_text(code: str) -> str:
    named = " (NUL)" if code == "U+0000" else ""
    return f"a cell contains {code}{named}: control characters but tab and line breaks, and bidi controls, are not text"
