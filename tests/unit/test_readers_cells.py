"""The shared cell cleaning of the catalog readers: prices, URLs, HTML, identifiers."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from catalog.readers.cells import (
    _collapse,
    _collapse_lines,
    clean_cell,
    html_to_text,
    is_identifier_header,
    is_mangled_number,
    mixed_script_words,
    normalize_url,
    split_urls,
)
from catalog.readers.prices import parse_price

amounts = st.decimals(min_value=0, max_value=10_000_000, places=2, allow_nan=False, allow_infinity=False)


@pytest.mark.parametrize(
    ("cell", "default", "amount", "currency", "noted"),
    [
        ("4.00 USD", None, "4.00", "USD", False),
        ("352 AED", "USD", "352", "AED", False),
        ("AED 15", None, "15", "AED", False),
        ("$12.50", None, "12.50", "USD", True),
        ("$12.50", "AUD", "12.50", "AUD", True),
        ("12,50 €", None, "12.50", "EUR", True),
        ("250.00", "RSD", "250.00", "RSD", False),
        ("1 234,50 руб.", None, "1234.50", "RUB", True),
        ("1,234", None, "1234", None, True),
        ("0,250", None, "0.250", None, True),
    ],
)
def test_parse_price(cell: str, default: str | None, amount: str, currency: str | None, noted: bool) -> None:
    parsed = parse_price(cell, default)
    assert (parsed.amount, parsed.currency, parsed.error) == (Decimal(amount), currency, None)
    assert (parsed.note is not None) == noted


@pytest.mark.parametrize(
    ("cell", "error"),
    [
        ("call us", "not a price"),
        ("100 ML", "not a price"),
        ("10 pcs", "unknown currency code 'PCS'"),
        ("-5", "negative price"),
        ("12.5.3", "not a number"),
    ],
)
def test_parse_price_rejects(cell: str, error: str) -> None:
    assert parse_price(cell, "USD").error == error
    assert parse_price(cell, "USD").amount is None


def test_parse_price_empty_is_no_price() -> None:
    assert parse_price("  ", "USD").amount is None and parse_price("  ", "USD").error is None


@given(amounts)
def test_price_round_trips_spec_and_european_forms(amount: Decimal) -> None:
    spec = parse_price(f"{amount:.2f} USD")
    assert (spec.amount, spec.currency, spec.note) == (amount, "USD", None)
    european = f"{amount:,.2f}".replace(",", " ").replace(".", ",") + " €"
    parsed = parse_price(european)
    assert (parsed.amount, parsed.currency) == (amount, "EUR")


@given(st.lists(st.integers(min_value=1, max_value=2000), min_size=1, max_size=5))
def test_split_urls_never_cuts_urls_with_commas(sizes: list[int]) -> None:
    urls = [f"https://static.example.com/media/x{n}.jpg/v1/fit/w_{n},h_{n},q_90/file.jpg" for n in sizes]
    assert split_urls(", ".join(urls)) == urls
    assert split_urls(",".join(urls)) == urls


@given(st.text(max_size=40))
def test_normalize_url_is_idempotent(path: str) -> None:
    once = normalize_url("https://img.example.com/" + path)
    if once is not None:
        assert once.isascii() and normalize_url(once) == once


def test_normalize_url_rejects_non_http() -> None:
    assert normalize_url("ftp://x.example/a.jpg") is None
    assert normalize_url("data:image/png;base64,AAAA") is None
    assert normalize_url("manual") is None
    assert normalize_url("https:///no-host.jpg") is None


def test_html_to_text() -> None:
    text, markup = html_to_text("<p>One&nbsp;two</p><script>x()</script><ul><li>A</li><li>B &amp; C</li></ul>")
    assert (text, markup) == ("One two\nA\nB & C", True)
    assert html_to_text("Plain\u2028next\u2029last") == ("Plain\nnext\nlast", False)
    assert html_to_text("Size < 5 and  spaced") == ("Size < 5 and spaced", False)


def test_cells_and_identifiers() -> None:
    assert clean_cell("  '-1 ") == "-1" and clean_cell("'Tis") == "'Tis" and clean_cell("\ufeffID") == "ID"
    assert is_mangled_number("3.65275E+11") and is_mangled_number("1E+12")
    assert not is_mangled_number("12E5") and not is_mangled_number("365275000000")
    assert all(map(is_identifier_header, ["ID", "Variant SKU", "Barcode", "g:gtin", "URL handle", "Артикул"]))
    assert not any(map(is_identifier_header, ["Hidden", "Title", "Price"]))
    assert mixed_script_words("Zlatna Vrbničkа Žlahtina") == ["Vrbničkа"]
    assert mixed_script_words("Чистый русский текст") == []


_SPACES = st.sampled_from([" ", "  ", "\t", "\n", "\r", "\r\n", "\xa0", "\u2028", "\u2029", "\u3000", "\x85", "\x0b"])


@given(st.lists(st.one_of(st.text(max_size=8), _SPACES), max_size=12).map("".join))
def test_the_fast_path_of_whitespace_cleaning_changes_nothing(text: str) -> None:
    """A printable cell without double spaces skips the line-by-line cleaning: same result."""
    assert _collapse(text) == _collapse_lines(text)
