"""Text that a tenant, a plan's or a catalog's author wrote: one rule for what it may hold (checked
where it enters: the /v1 body and query, a plan once parsed, a catalog cell, an upload's name) and
one for how it is shown (the operator's terminal and pages), for the rows written before the rule.

Refused: control characters but tab and line breaks (C0, DEL, C1: a terminal obeys ESC, BEL,
backspace and CSI; Postgres refuses a NUL), lone surrogates (no UTF-8 form), and the bidi
embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069), which reorder what a page or
a terminal shows (`ok \\u202eevorppa` reads "ok approve"). The marks U+200E/U+200F stay: they
cannot reverse a word, and right-to-left text needs them."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

UNSAFE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
REFUSED = "contains a control character (only tab and line breaks), a bidi control or a lone surrogate"


def first_unsafe(text: str) -> str | None:
    """The first refused character of `text` as `U+001B`, or None."""
    found = UNSAFE.search(text)
    return f"U+{ord(found.group()):04X}" if found else None


def unsafe_in(data: Any) -> str | None:
    """Where in parsed data (JSON or TOML: dicts, lists, strings) the first string with a refused
    character is, as a dotted path ("plan.templates.0.prompts.en-US"; "" for `data` itself), or None.
    Keys count: a key with one is named by its path with the character shown."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            if UNSAFE.search(value):
                return where
        elif isinstance(value, dict):
            for key, item in value.items():
                path = f"{where}.{shown_name(key)}" if where else shown_name(key)
                if isinstance(key, str) and UNSAFE.search(key):
                    return path
                stack.append((path, item))
        elif isinstance(value, list):
            stack.extend((f"{where}.{i}" if where else str(i), item) for i, item in enumerate(value))
    return None


def shown(text: str) -> str:
    """`text` safe to print or put on a page: each refused character written as its escape
    (`\\x1b`, `\\u202e`), so the operator sees that it was there and nothing obeys it."""
    return UNSAFE.sub(_escape, text) if UNSAFE.search(text) else text


def escaped_json(text: str) -> str:
    """JSON text (`json.dumps(..., ensure_ascii=False)`) with each refused character written as its
    JSON escape: the same value, nothing for a terminal to obey (they stand only inside strings)."""
    return UNSAFE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


def shown_name(name: object) -> str:
    """A name for a message: shown, at most 40 characters."""
    return shown(str(name))[:40]


def _escape(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def is_blank(text: str) -> bool:
    """True when `text` shows nothing: only white space and invisible format characters (U+200B,
    U+2060, a BOM: Unicode category Cf)."""
    return all(c.isspace() or unicodedata.category(c) == "Cf" for c in text)


def leading_invisible(text: str) -> int:
    """How many characters at the start of `text` show nothing (white space or format characters)."""
    for i, c in enumerate(text):
        if not (c.isspace() or unicodedata.category(c) == "Cf"):
            return i
    return len(text)
