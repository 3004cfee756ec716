"""Price cells to Decimal + ISO 4217 code.

Exports write prices many ways (`4.00 USD`, `352 AED`, `$12.50`, `12,50 €`, `1.234,56`, `250.00`).
The spec form (number + ISO code, or a bare number) is taken as is; anything that needed a real
repair (a symbol read as a currency, decimal comma, thousands separators) comes back with a note
so the caller can record a NORMALIZED issue; text that is no price at all comes back with an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

# Symbol -> currencies it can mean; the plan's default wins when it is one of them.
_SYMBOLS: dict[str, tuple[str, ...]] = {
    "US$": ("USD",),
    "C$": ("CAD",),
    "CA$": ("CAD",),
    "A$": ("AUD",),
    "AU$": ("AUD",),
    "NZ$": ("NZD",),
    "HK$": ("HKD",),
    "S$": ("SGD",),
    "R$": ("BRL",),
    "$": ("USD", "CAD", "AUD", "NZD", "SGD", "HKD", "MXN"),
    "€": ("EUR",),
    "£": ("GBP",),
    "¥": ("JPY", "CNY"),
    "₹": ("INR",),
    "₽": ("RUB",),
    "руб.": ("RUB",),
    "руб": ("RUB",),
    "₺": ("TRY",),
    "₩": ("KRW",),
    "₪": ("ILS",),
    "₴": ("UAH",),
    "₫": ("VND",),
    "฿": ("THB",),
    "₱": ("PHP",),
    "zł": ("PLN",),
    "Kč": ("CZK",),
    "kr": ("SEK", "NOK", "DKK", "ISK"),
}
# ISO 4217 codes in circulation: a three-letter word after a number ("10 pcs") is not a currency.
_ISO_CODE_LIST = """AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB BRL BSD BTN BWP
    BYN BZD CAD CDF CHF CLP CNY COP CRC CUP CVE CZK DJF DKK DOP DZD EGP ERN ETB EUR FJD FKP GBP GEL
    GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR IQD IRR ISK JMD JOD JPY KES KGS KHR KMF KPW
    KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK MXN MYR MZN
    NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG QAR RON RSD RUB RWF SAR SBD SCR SDG SEK
    SGD SHP SLE SLL SOS SRD SSP STN SVC SYP SZL THB TJS TMT TND TOP TRY TTD TWD TZS UAH UGX USD UYU
    UZS VES VND VUV WST XAF XCD XCG XOF XPF YER ZAR ZMW ZWG ZWL"""
_ISO_CODES = frozenset(_ISO_CODE_LIST.split())
_SYMBOL_PATTERN = "|".join(re.escape(s) for s in sorted(_SYMBOLS, key=len, reverse=True))
_NUMBER = r"[+-]?[\d.,' ]*\d[\d.,' ]*"
_WITH_CODE = re.compile(
    rf"^(?:(?P<pre>[A-Za-z]{{3}})\s*(?P<n1>{_NUMBER})|(?P<n2>{_NUMBER})\s*(?P<post>[A-Za-z]{{3}}))$"
)
_WITH_SYMBOL = re.compile(
    rf"^(?:(?P<pre>{_SYMBOL_PATTERN})\s*(?P<n1>{_NUMBER})|(?P<n2>{_NUMBER})\s*(?P<post>{_SYMBOL_PATTERN}))$"
)
_BARE = re.compile(rf"^{_NUMBER}$")
_THOUSANDS_COMMA = re.compile(r"^[1-9]\d{0,2},\d{3}$")  # 1,234 but not 0,250 or 12,50
_SPACES = re.compile(r"[\s\xa0\u202f\u2009]+")


@dataclass(frozen=True)
class ParsedPrice:
    amount: Decimal | None = None
    currency: str | None = None
    note: str | None = None  # set when the value needed a non-trivial repair
    error: str | None = None  # set when the cell is not a price; amount is then None


def parse_price(cell: str, default_currency: str | None = None) -> ParsedPrice:
    """Read one price cell; an empty cell is simply no price."""
    text = _SPACES.sub(" ", cell).strip()
    if not text:
        return ParsedPrice()
    default = default_currency.upper() if default_currency else None
    notes: list[str] = []
    if match := _WITH_CODE.match(text):
        number, currency = match["n1"] or match["n2"], (match["pre"] or match["post"]).upper()
        if currency not in _ISO_CODES:
            return ParsedPrice(error=f"unknown currency code {currency!r}")
    elif match := _WITH_SYMBOL.match(text):
        symbol = match["pre"] or match["post"]
        number, currency = match["n1"] or match["n2"], _symbol_currency(symbol, default)
        notes.append(f"currency symbol {symbol!r} read as {currency}")
    elif _BARE.match(text):
        number, currency = text, default
    else:
        return ParsedPrice(error="not a price")
    amount, separator_note = _parse_number(number.strip())
    if amount is None:
        return ParsedPrice(error="not a number")
    if amount < 0:
        return ParsedPrice(error="negative price")
    if separator_note:
        notes.append(separator_note)
    return ParsedPrice(amount, currency, "; ".join(notes) or None)


def _symbol_currency(symbol: str, default: str | None) -> str:
    candidates = _SYMBOLS[symbol]
    return default if default in candidates else candidates[0]


def _parse_number(number: str) -> tuple[Decimal | None, str | None]:
    """Decimal of a number written with any common separators, and a note if they were converted."""
    compact = number.replace(" ", "").replace("'", "")
    sign = compact[0] if compact[0] in "+-" else ""
    compact = compact.lstrip("+-")
    note = "thousands separators removed" if len(compact) + len(sign) != len(number) else None
    commas, dots = compact.count(","), compact.count(".")
    decimal_mark, thousands = (".", "") if dots == 1 and not commas else ("", "")
    if commas and dots:
        decimal_mark = "," if compact.rfind(",") > compact.rfind(".") else "."
        thousands = "." if decimal_mark == "," else ","
        note = f"read {decimal_mark!r} as decimal mark and {thousands!r} as thousands separator"
    elif commas == 1 and not _THOUSANDS_COMMA.match(compact):
        decimal_mark, note = ",", "read ',' as decimal mark"
    elif commas or dots > 1:
        thousands = "," if commas else "."
        note = f"read {thousands!r} as thousands separator"
    integer, _, fraction = compact.partition(decimal_mark) if decimal_mark else (compact, "", "")
    if thousands:
        if not re.fullmatch(rf"\d{{1,3}}(?:{re.escape(thousands)}\d{{3}})+", integer):
            return None, None
        integer = integer.replace(thousands, "")
    if not (integer or fraction) or not (integer + fraction).isdigit():
        return None, None
    return Decimal(f"{sign}{integer or 0}.{fraction or 0}" if decimal_mark else f"{sign}{integer}"), note


def is_currency_code(value: str) -> bool:
    return value.upper() in _ISO_CODES
