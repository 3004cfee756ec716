"""Catalog readers on small hand-made files, one per edge case (tests/fixtures/catalogs)."""

from __future__ import annotations

import tracemalloc
from decimal import Decimal
from pathlib import Path

import pytest

from catalog.readers import CatalogFormatError, CatalogRead, read_catalog
from catalog.records import Issue, IssueAction, ProductRecord

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "catalogs"


def read_all(name: str, **kwargs: object) -> tuple[CatalogRead, list[ProductRecord]]:
    read = read_catalog(FIXTURES / name, **kwargs)  # type: ignore[arg-type]
    return read, list(read.products)


def by_id(products: list[ProductRecord]) -> dict[str, ProductRecord]:
    return {p.product_id: p for p in products}


def summary(issues: list[Issue]) -> list[tuple[int | None, str, IssueAction]]:
    return [(i.row, i.field, i.action) for i in issues]


def test_bom_and_crlf() -> None:
    raw = (FIXTURES / "bom_crlf.csv").read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf") and b"\r\n" in raw  # the fixture itself is intact
    read, products = read_all("bom_crlf.csv")
    assert read.format == "plain" and read.headers[0] == "product_id"
    assert [(p.product_id, p.rows, p.category) for p in products] == [
        ("P-1", [2], "Kitchen"),
        ("P-2", [3], "Kitchen"),
    ]
    assert (products[1].price, products[1].currency) == (Decimal("13.00"), "EUR")
    assert read.issues == []


def test_junk_lines_and_bom_before_header() -> None:
    read, products = read_all("junk_before_header.csv", default_currency="EUR")
    assert read.header_line == 4 and read.headers == ["product_id", "title", "image_url", "price"]
    assert [(p.product_id, p.rows, p.price, p.currency) for p in products] == [("J-1", [5], Decimal("30"), "EUR")]
    assert summary(read.issues) == [(4, "(file)", IssueAction.WARNING)]


def test_excel_sep_directive_and_semicolons() -> None:
    read, products = read_all("semicolon_sep.csv")
    assert (read.delimiter, read.header_line) == (";", 2)
    assert (products[0].price, products[0].currency) == (Decimal("12.50"), "EUR")


def test_multiline_quoted_fields_keep_first_line_numbers() -> None:
    read, products = read_all("multiline.csv")
    assert [(p.product_id, p.rows) for p in products] == [("M-1", [2]), ("M-2", [4]), ("M-3", [5]), ("M-4", [9])]
    vase, bowl, cup, _ = products
    assert vase.title == 'Vase "Tall"'
    assert vase.description == "Line one\nLine two & more"
    assert bowl.description == "First\nSecond half"  # U+2028 -> newline, nbsp -> space
    assert cup.description == "a\nb\nc"
    assert summary(read.issues) == [(2, "description", IssueAction.NORMALIZED)]  # HTML in a plain column


def test_ragged_rows_rejected_not_shifted() -> None:
    read, products = read_all("ragged.csv")
    assert [p.product_id for p in products] == ["R-1", "R-4"]
    assert products[1].title == "Quoted, comma" and products[1].price == Decimal("7")
    assert [(i.row, i.field, i.action, i.reason) for i in read.issues] == [
        (3, "(row)", IssueAction.ROW_INVALID, "expected 4 fields as in the header, got 5"),
        (4, "(row)", IssueAction.ROW_INVALID, "expected 4 fields as in the header, got 3"),
    ]
    assert read.rows == 4 and read.products_seen == 2


def test_duplicate_id_stops_import() -> None:
    read, products = read_all("duplicate_id.csv")
    assert [p.title for p in products] == ["First", "Second"]
    [issue] = read.issues
    assert (issue.row, issue.product_id, issue.action) == (4, "D-1", IssueAction.STOP_IMPORT)
    assert "line 2" in issue.reason
    assert read.stop_import and read.products_seen == 2


def test_empty_id_stops_import() -> None:
    read, products = read_all("empty_id.csv")
    assert [p.product_id for p in products] == ["E-1"]
    assert summary(read.issues) == [(2, "product_id", IssueAction.STOP_IMPORT)]
    assert read.stop_import


def test_missing_or_invalid_main_image() -> None:
    read, products = read_all("missing_image.csv")
    assert [(p.product_id, p.image_urls) for p in products] == [
        ("I-4", ["images/i4.jpg"]),
        ("I-5", ["https://img.example.com/i5.jpg"]),
    ]
    assert [(i.row, i.value, i.action) for i in read.issues] == [
        (2, "", IssueAction.ROW_INVALID),
        (3, "ftp://img.example.com/i2.jpg", IssueAction.REJECTED),
        (3, "", IssueAction.ROW_INVALID),
        (4, "see attached", IssueAction.REJECTED),
        (4, "", IssueAction.ROW_INVALID),
        (6, "javascript:alert(1)", IssueAction.REJECTED),
    ]
    assert read.products_seen == 5 and read.products_emitted == 2 and not read.stop_import


def test_prices() -> None:
    read, products = read_all("prices.csv", default_currency="CAD")
    got = {p.product_id: (p.price, p.currency) for p in products}
    assert got == {
        "PR-1": (Decimal("4.00"), "USD"),
        "PR-2": (Decimal("352"), "AED"),
        "PR-3": (Decimal("12.50"), "CAD"),  # "$" means the default when it is a dollar currency
        "PR-4": (Decimal("12.50"), "EUR"),
        "PR-5": (Decimal("250.00"), "CAD"),
        "PR-6": (Decimal("99"), "GBP"),
        "PR-7": (None, None),
        "PR-8": (Decimal("1234.56"), "EUR"),
        "PR-9": (None, None),
    }
    assert [(i.product_id, i.action) for i in read.issues] == [
        ("PR-3", IssueAction.NORMALIZED),
        ("PR-4", IssueAction.NORMALIZED),
        ("PR-7", IssueAction.REJECTED),
        ("PR-8", IssueAction.NORMALIZED),
    ]


def test_mangled_numbers_and_excel_guards() -> None:
    read, products = read_all("mangled_numbers.csv")
    assert [(i.row, i.field, i.value, i.action) for i in read.issues] == [
        (2, "product_id", "3.65275E+11", IssueAction.WARNING),
        (3, "barcode", "4.6347E+11", IssueAction.WARNING),
    ]
    assert products[0].attributes["published"] == "-1"
    assert products[1].attributes["note"] == "'=SUM(A1)"  # the quote that disarms a formula is kept


def test_merchant_feed_prefixed_headers_and_comma_urls() -> None:
    read, products = read_all("merchant_feed.tsv")
    assert read.format == "merchant_center" and read.delimiter == "\t"
    soda, juice = products
    assert soda.image_urls == [
        "https://static.example.com/media/a~mv2.jpg/v1/fit/w_1920,h_1920,q_90/file.jpg",
        "https://static.example.com/b/w_100,h_100/1.jpg",
        "https://static.example.com/c/w_100,h_100/2.jpg",
    ]
    assert (soda.price, soda.currency, soda.category) == (Decimal("4.00"), "USD", "Drinks > Soda")
    assert soda.description == "Fizzy drink" and soda.attributes == {"g:sale_price": "3.50 USD"}
    assert juice.link == "https://shop.example.com/p/%D8%AC%D9%88%D8%B3"
    assert summary(read.issues) == [(2, "g:description", IssueAction.NORMALIZED)]


def test_urls_encoded_once() -> None:
    _, products = read_all("urls.csv")
    assert [p.image_urls for p in products] == [
        ["https://15milja.com/images/wines/aleksandrovi%C4%87-harizma.png"],
        ["https://img.example.com/%C4%8Da%C5%A1a%20vina.jpg"],
        ["https://img.example.com/50%25off.jpg"],
        ["https://xn--bcher-kva.example/cover.jpg"],
        ["https://img.example.com/a.jpg", "https://img.example.com/b.jpg", "/local/c.jpg"],
    ]


def test_mapping_wins_and_fills_fields() -> None:
    mapping = {"product_id": "ID", "title": "Title", "image_url": "Image", "price": "Sale_Price", "link": "URL"}
    read, products = read_all("custom_headers.csv", mapping=mapping)
    assert read.format == "mapped"
    [widget] = products
    assert (widget.product_id, widget.title, widget.price, widget.currency) == (
        "X-1",
        "Widget",
        Decimal("19.99"),
        "EUR",
    )
    assert widget.link == "https://shop.example.com/x1" and widget.attributes == {"Colour": "Red"}


def test_mapping_over_a_detectable_file() -> None:
    read, products = read_all("bom_crlf.csv", mapping={"title": "description"})
    assert read.format == "mapped" and products[0].title == "A red mug"
    assert read_catalog(FIXTURES / "shopify_groups.csv", mapping={}).format == "shopify_legacy"  # empty: detect


def test_mapping_errors() -> None:
    with pytest.raises(CatalogFormatError) as unknown_field:
        read_catalog(FIXTURES / "custom_headers.csv", mapping={"sku": "ID"})
    assert unknown_field.value.missing_fields == ["sku"]
    with pytest.raises(CatalogFormatError) as absent_header:
        read_catalog(FIXTURES / "custom_headers.csv", mapping={"product_id": "ID", "image_url": "Picture"})
    assert absent_header.value.missing_fields == ["image_url"]
    assert absent_header.value.headers_found == ["ID", "Title", "Sale_Price", "Image", "URL", "Colour"]


def test_unknown_headers_raise_format_error() -> None:
    with pytest.raises(CatalogFormatError) as caught:
        read_catalog(FIXTURES / "unknown_headers.csv")
    error = caught.value
    assert error.headers_found == ["Artikel", "Bezeichnung", "Bild", "Preis"]
    assert error.missing_fields == ["product_id", "title", "image_url"]
    assert "'Artikel', 'Bezeichnung', 'Bild', 'Preis'" in error.message
    assert "product_id, title, image_url" in error.message


def test_custom_headers_without_mapping_read_as_generic() -> None:
    read, products = read_all("custom_headers.csv")
    assert read.format == "generic"
    [widget] = products
    assert (widget.product_id, widget.price, widget.currency) == ("X-1", Decimal("19.99"), "EUR")  # Sale_Price
    assert widget.image_urls == ["https://img.example.com/x1.jpg"] and widget.attributes == {"Colour": "Red"}
    [guess] = read.issues
    assert (guess.row, guess.field, guess.action) == (None, "(header)", IssueAction.WARNING)
    assert guess.value == "ID, Image, Sale_Price, URL"


def test_generic_synonym_headers() -> None:
    read, products = read_all("synonym_headers.csv")
    assert read.format == "generic"
    red, blue = products
    assert (red.product_id, red.title, red.description) == ("MUG-RED", "Red mug", "Stoneware mug")
    assert red.image_urls == ["https://img.example.com/mug-red.jpg"]
    assert (red.price, red.currency) == (Decimal("12.50"), "EUR")
    assert (red.category, red.brand, red.link) == ("Kitchen", "Acme", "https://shop.example.com/mug-red")
    # one column per field: the preferred synonym wins, the others stay attributes
    assert red.attributes == {"Item-ID": "1001", "Sale Price": "9.99", "Stock": "4"}
    assert blue.price is None  # a regular price column exists, so Sale Price is never a fallback
    [guess] = read.issues
    assert (guess.row, guess.product_id, guess.field, guess.action) == (None, None, "(header)", IssueAction.WARNING)
    assert guess.reason.count(" as ") == 7  # currency and Brand are exact field names, not guesses
    for header, field in [
        ("SKU", "product_id"),
        ("Product_Name", "title"),
        ("Main Image", "image_url"),
        ("Regular Price", "price"),
        ("Details", "description"),
        ("Product Type", "category"),
        ("Product URL", "link"),
    ]:
        assert f"{header!r} as {field}" in guess.reason


def test_exact_field_names_are_not_reported_as_guesses(tmp_path: Path) -> None:
    path = tmp_path / "exact.csv"
    path.write_text("Product-ID,TITLE,Image_URL,Price\nE-1,Exact,https://img.example.com/e.jpg,5\n")
    read = read_catalog(path)
    products = list(read.products)
    assert read.format == "generic" and products[0].product_id == "E-1"
    assert read.issues == []


def test_no_synonym_headers_raise_format_error() -> None:
    with pytest.raises(CatalogFormatError) as caught:
        read_catalog(FIXTURES / "near_miss_headers.csv")  # Identifier, Heading, Img: no fuzzy matching
    error = caught.value
    assert error.headers_found == ["Identifier", "Heading", "Img", "Cost_EUR"]
    assert error.missing_fields == ["product_id", "title", "image_url"]
    assert "'Identifier', 'Heading', 'Img', 'Cost_EUR'" in error.message
    assert "product_id, title, image_url" in error.message


def test_synonyms_without_an_image_column_raise_format_error() -> None:
    with pytest.raises(CatalogFormatError) as caught:
        read_catalog(FIXTURES / "synonyms_no_image.csv")
    assert caught.value.missing_fields == ["image_url"]
    assert caught.value.headers_found == ["SKU", "Name", "Price", "Stock"]


def test_no_header_at_all(tmp_path: Path) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_text("\n\n")
    with pytest.raises(CatalogFormatError, match="no header row"):
        read_catalog(empty)


def test_woocommerce_variations_fold_in_any_order() -> None:
    read, products = read_all("woo_variations.csv", default_currency="EUR")
    assert [p.product_id for p in products] == ["id:12", "set", "ext", "tee"]  # variable parents last
    tee = by_id(products)["tee"]
    assert tee.image_urls == [
        "https://img.example.com/tee.jpg",
        "https://img.example.com/tee-red.jpg",
        "https://img.example.com/tee-blue.jpg",
    ]
    assert (tee.price, tee.rows, tee.attributes["variants"]) == (Decimal("20"), [2, 3, 5], "2")
    assert tee.description == "Soft cotton"  # WooCommerce bodies are HTML by design: no issue
    ext = by_id(products)["ext"]
    assert ext.image_urls == ["https://img.example.com/e,1.jpg", "https://img.example.com/e2.jpg"]
    assert ext.price == Decimal("1.5")
    assert [(i.row, i.field, i.value, i.action) for i in read.issues] == [
        (8, "Regular price", "1,5", IssueAction.NORMALIZED),
        (6, "Parent", "ghost", IssueAction.ROW_INVALID),
    ]
    assert read.products_seen == 4


def test_shopify_grouping_duplicates_and_orphans() -> None:
    read, products = read_all("shopify_groups.csv", default_currency="EUR")
    mug, cap = products
    assert (mug.product_id, mug.title, mug.description, mug.rows) == ("mug", "Mug", "Big mug", [2, 3, 4])
    assert mug.image_urls == [
        "https://img.example.com/mug1.jpg",
        "https://img.example.com/mug2.jpg",
        "https://img.example.com/mug-var.jpg",
    ]
    assert (mug.price, mug.currency, mug.attributes["variants"]) == (Decimal("9.99"), "EUR", "2")
    assert cap.image_urls == ["https://img.example.com/cap-var.jpg"]  # variant image as the fallback
    assert [(i.row, i.field, i.action) for i in read.issues] == [
        (5, "Variant Barcode", IssueAction.WARNING),
        (6, "Handle", IssueAction.STOP_IMPORT),
        (7, "Title", IssueAction.ROW_INVALID),
    ]
    assert read.products_seen == 3 and read.stop_import


def test_cp1252_fallback() -> None:
    read, products = read_all("latin1.csv")
    assert read.encoding == "cp1252" and products[0].title == "Café crème"
    assert summary(read.issues) == [(None, "(file)", IssueAction.WARNING)]


def test_utf16_with_bom(tmp_path: Path) -> None:
    path = tmp_path / "utf16.csv"
    path.write_text("product_id\ttitle\timage_url\nU-1\tÜber\thttps://img.example.com/u.jpg\n", encoding="utf-16")
    read = read_catalog(path)
    products = list(read.products)
    assert read.encoding == "utf-16" and products[0].title == "Über"


def test_streams_100k_rows(tmp_path: Path) -> None:
    path = tmp_path / "big.csv"
    with path.open("w", encoding="utf-8") as handle:
        handle.write("product_id,title,description,image_url,price,currency,category\n")
        for i in range(100_000):
            handle.write(f"SKU-{i},Product {i},Plain text {i},https://cdn.example.com/{i}.jpg,{i % 97}.99,USD,X\n")
    read = read_catalog(path)
    first = next(read.products)
    assert first.product_id == "SKU-0" and first.rows == [2]
    assert read.rows == 1  # nothing read ahead: records are pulled one at a time
    last = first
    count = 1
    for product in read.products:
        count, last = count + 1, product
    assert (count, read.rows, read.products_emitted, last.rows) == (100_000, 100_000, 100_000, [100_001])
    assert read.issues == []


def test_memory_does_not_grow_with_rows(tmp_path: Path) -> None:
    path = tmp_path / "mid.csv"
    with path.open("w", encoding="utf-8") as handle:
        handle.write("product_id,title,description,image_url,price,currency,category\n")
        for i in range(20_000):
            handle.write(f"SKU-{i},Product {i},Plain text {i},https://cdn.example.com/{i}.jpg,{i % 97}.99,USD,X\n")
    tracemalloc.start()
    try:
        read = read_catalog(path)
        for _ in read.products:
            pass
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert read.products_emitted == 20_000
    assert peak < 12_000_000  # the id set only; holding the 20k records would take ~40 MB
