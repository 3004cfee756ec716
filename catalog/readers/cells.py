"""Cell cleaning shared by every format: one place decides what a "clean" value is.

All functions here are pure (string in, string out); recording issues is `build.Collector`'s job.
"""

from __future__ import annotations

import re
import unicodedata
from html import unescape
from html.parser import HTMLParser
from urllib.parse import quote, urlsplit, urlunsplit

# Spreadsheet programs turn long digit strings (barcodes, SKUs) into floats: 3.65275E+11.
_MANGLED_NUMBER = re.compile(r"^[+-]?\d+(?:[.,]\d+)?E\+\d+$", re.IGNORECASE)
# Excel's text prefix: '0042 or '-1 keep a number as typed. It is dropped only where the rest can never
# be a formula (it starts with a digit, or is a signed number): '=A1, '@SUM(1) or '-1+A1 keep their quote,
# so nothing read here turns into a formula that the file had disarmed.
_EXCEL_GUARD = re.compile(r"^'(?=\d|[-+]\d[\d.,]*$)")
# Columns whose values are identifiers, so a float-looking value there is damage, not data.
_IDENTIFIER_HEADER = re.compile(
    r"(^|[\s/_(:])(id|sku|barcode|gtin|mpn|ean|upc|isbn|handle|артикул)($|[\s)_])|part number",
    re.IGNORECASE,
)
# Where one image cell holds several URLs: a comma before a new absolute URL or before a path.
# A comma inside a URL (Wix: /fit/w_1920,h_1920,q_90/) is never followed by "http" or ", /".
_URL_SPLIT = re.compile(r"\s*,\s*(?=https?://)|,\s+(?=/)|\s+(?=https?://)", re.IGNORECASE)
_LONE_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
# Characters that may stand unescaped in a URI (RFC 3986 reserved + unreserved) plus "%".
_URI_SAFE = "!#$%&'()*+,/:;=?@[]~-._"
_BLOCK_TAG_NAMES = "p br div li ul ol tr td th h1 h2 h3 h4 h5 h6 table section article blockquote pre hr"
_BLOCK_TAGS = frozenset(_BLOCK_TAG_NAMES.split())
_INVISIBLE_TAGS = frozenset({"script", "style", "head", "title"})
_HORIZONTAL_SPACE = re.compile(r"[^\S\n]+")


def clean_cell(value: str) -> str:
    """Trim a raw cell and drop Excel's text prefix in front of a number, which is not part of the value."""
    return _EXCEL_GUARD.sub("", value.replace("\ufeff", "").strip())


def clean_text(value: str) -> str:
    """Plain text from a text cell: entities decoded, whitespace normalized."""
    return _collapse(unescape(value))


def _collapse(text: str) -> str:
    """Normalize whitespace the way a renderer would: nbsp is a space, U+2028/9 a line break.

    Most cells need nothing of it: a printable text (no line break, tab, nbsp or other Unicode
    space: `isprintable` is False for all of them, ASCII space excepted) without two spaces in a
    row is only trimmed (a large import cleans four text cells per row)."""
    if text.isprintable() and "  " not in text:
        return text.strip(" ")
    return _collapse_lines(text)


def _collapse_lines(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = text.replace("\u2028", "\n").replace("\u2029", "\n").replace("\xa0", " ")
    lines = (_HORIZONTAL_SPACE.sub(" ", line).strip() for line in text.split("\n"))
    return "\n".join(line for line in lines if line)


class _TextExtractor(HTMLParser):
    """Collects text, turning block-level tags into line breaks so paragraphs stay apart."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.saw_tag = False
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.saw_tag = True
        if tag in _INVISIBLE_TAGS:
            self._hidden += 1
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        self.saw_tag = True
        if tag in _INVISIBLE_TAGS:
            self._hidden = max(0, self._hidden - 1)
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self.parts.append(data)


def html_to_text(value: str) -> tuple[str, bool]:
    """Plain text of an HTML body, and whether markup was actually removed (worth a note)."""
    if "<" not in value:
        return clean_text(value), False
    parser = _TextExtractor()
    parser.feed(value)
    parser.close()
    return _collapse("".join(parser.parts)), parser.saw_tag


def split_urls(cell: str) -> list[str]:
    """Split a multi-image cell without cutting URLs that contain commas themselves."""
    return [part.strip() for part in _URL_SPLIT.split(cell) if part.strip()]


def normalize_url(value: str) -> str | None:
    """A valid URI for an absolute http(s) URL or a relative path, else None.

    Non-ASCII characters and spaces are percent-encoded; existing %XX escapes are kept as they
    are (never double-encoded), so an already-encoded URL comes back unchanged.
    """
    value = value.strip()
    try:
        parts = urlsplit(value)
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme and scheme not in ("http", "https"):
        return None
    if scheme and not parts.hostname:
        return None
    if not scheme and not _looks_like_path(value):
        return None
    netloc = parts.netloc
    if parts.hostname and not parts.hostname.isascii():
        try:
            netloc = netloc.replace(parts.hostname, parts.hostname.encode("idna").decode("ascii"))
        except UnicodeError:
            return None
    path, query, fragment = (_encode(p) for p in (parts.path, parts.query, parts.fragment))
    return urlunsplit((scheme, netloc, path, query, fragment))


def _looks_like_path(value: str) -> bool:
    """A relative image reference: has a folder or a file extension, and no inner spaces."""
    return " " not in value and ("/" in value or re.search(r"\.[A-Za-z0-9]{2,5}$", value) is not None)


def _encode(part: str) -> str:
    return quote(_LONE_PERCENT.sub("%25", part), safe=_URI_SAFE)


def is_mangled_number(value: str) -> bool:
    """True for spreadsheet scientific notation (3.65275E+11): the original digits are lost."""
    return bool(_MANGLED_NUMBER.match(value))


def is_identifier_header(header: str) -> bool:
    return bool(_IDENTIFIER_HEADER.search(header))


def mixed_script_words(text: str) -> list[str]:
    """Words mixing Latin and Cyrillic letters: usually a look-alike typo that breaks search/TTS."""
    if text.isascii():
        return []
    found = []
    for word in re.findall(r"\w+", text):
        scripts = {_script(ch) for ch in word if ch.isalpha()}
        if {"LATIN", "CYRILLIC"} <= scripts:
            found.append(word)
    return found


def _script(ch: str) -> str:
    return unicodedata.name(ch, "UNKNOWN").split(" ", 1)[0]


def header_key(header: str) -> str:
    """Comparable form of a header: BOM and outer space removed, case and inner spacing folded."""
    return " ".join(header.replace("\ufeff", "").split()).casefold()
