"""Acceptance of the catalog readers on the real exports in shared/catalogs (read as they are)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from catalog.readers import CatalogRead, read_catalog
from catalog.records import IssueAction, ProductRecord

# The repo is <root>/main and the shared files <root>/shared (CI puts a copy of shared/ beside it).
CATALOGS = Path(__file__).resolve().parents[2].parent / "shared" / "catalogs"
# A plain clone has no shared/ beside it: these tests then skip, saying where they looked.
pytestmark = pytest.mark.skipif(not CATALOGS.is_dir(), reason=f"shared catalog corpus not found at {CATALOGS}")
AR_FEED_MAPPING = {"product_id": "ID", "title": "Title", "image_url": "Image", "price": "Sale_Price"}


def read_all(relative: str, **kwargs: object) -> tuple[CatalogRead, list[ProductRecord]]:
    assert CATALOGS.is_dir(), f"shared catalogs not found at {CATALOGS}"
    read = read_catalog(CATALOGS / relative, **kwargs)  # type: ignore[arg-type]
    return read, list(read.products)


def issues_of(read: CatalogRead, action: IssueAction) -> list:
    return [issue for issue in read.issues if issue.action is action]


# file, format, data records, products seen (distinct ids), valid products emitted
COUNTS = [
    ("shopify/shopifypartners__apparel.csv", "shopify_legacy", 22, 20, 20),
    ("shopify/shopifypartners__home-and-garden.csv", "shopify_legacy", 21, 20, 20),
    ("shopify/shopifypartners__jewelery.csv", "shopify_legacy", 41, 20, 20),
    ("shopify/kcohen1997__product_template.csv", "shopify_legacy", 17, 3, 3),
    ("shopify/hirachu__product_template_2025format.csv", "shopify_2025", 15, 2, 1),
    ("shopify/parispousse__products_export.csv", "shopify_legacy", 159, 40, 40),
    ("shopify/stoa__product_template_2025format.csv", "shopify_2025", 28, 0, 0),
    (
        "woocommerce/woocommerce_official_sample_products__2018_verbatim_via_classic-commerce_b3af5c808.csv",
        "woocommerce",
        25,
        18,
        18,
    ),
    ("woocommerce/vinoteka-15-milja__woocommerce-products.csv", "woocommerce", 404, 404, 399),
    ("woocommerce/artur8800-shop__wc-product-export_ru-localized.csv", "woocommerce", 9, 9, 9),
    ("google_merchant/wix-ucp-tpa__data_products-feed.tsv", "merchant_center", 5, 5, 5),
    ("google_merchant/m5zoon__google_merchant_feed.tsv", "merchant_center", 3, 3, 3),
    ("google_merchant/m5zoon__google_merchant_feed_en.tsv", "merchant_center", 30, 30, 30),
    ("google_merchant/m5zoon__public_feeds_merchant-feed-ar.csv", "generic", 263, 263, 263),
]


@pytest.mark.parametrize(("relative", "fmt", "rows", "seen", "emitted"), COUNTS)
def test_real_catalog_counts(relative: str, fmt: str, rows: int, seen: int, emitted: int) -> None:
    read, products = read_all(relative, default_currency="USD")
    assert (read.format, read.rows, read.products_seen) == (fmt, rows, seen)
    assert len(products) == read.products_emitted == emitted
    assert len({p.product_id for p in products}) == emitted
    assert all(p.main_image for p in products)


def test_every_real_file_reads_without_a_mapping() -> None:
    files = sorted(p for p in CATALOGS.rglob("*") if p.is_file() and p.suffix in (".csv", ".tsv"))
    assert len(files) >= 14
    for path in files:
        read = read_catalog(path)  # no CatalogFormatError: every shared file is importable as is
        assert sum(1 for _ in read.products) == read.products_emitted


def test_shopify_apparel_first_product() -> None:
    _, products = read_all("shopify/shopifypartners__apparel.csv", default_currency="USD")
    shirt = products[0]
    assert shirt.product_id == "ocean-blue-shirt"
    assert shirt.title == "Ocean Blue Shirt"
    assert shirt.price == Decimal("50") and shirt.currency == "USD"
    assert shirt.image_urls == ["https://burst.shopifycdn.com/photos/young-man-in-bright-fashion_925x.jpg"]
    assert all("\xa0" not in p.description and "\r" not in p.description for p in products)


def test_shopify_jewelery_groups_continuation_rows() -> None:
    read, products = read_all("shopify/shopifypartners__jewelery.csv")
    by_id = {p.product_id: p for p in products}
    bracelet = by_id["chain-bracelet"]
    assert bracelet.rows == [2, 3]
    assert bracelet.image_urls == [
        "https://burst.shopifycdn.com/photos/7-chakra-bracelet_925x.jpg",
        "https://burst.shopifycdn.com/photos/navy-blue-chakra-bracelet_925x.jpg",
    ]
    assert bracelet.attributes["variants"] == "2"
    gemstone = by_id["gemstone"]
    assert len(gemstone.image_urls) == 4
    assert gemstone.description.startswith("Gemstone pendant, housed in sterling silver")
    assert "<" not in gemstone.description and "\nBoho Chic\n" in gemstone.description
    assert not any("\u2028" in p.description for p in products)
    assert all(p.currency is None for p in products)  # Shopify has no currency and none was given
    assert not read.stop_import


def test_shopify_multiline_bodies_keep_physical_line_numbers() -> None:
    _, products = read_all("shopify/parispousse__products_export.csv", default_currency="EUR")
    gift = products[0]
    assert gift.product_id == "gift-card"
    assert gift.rows == [2, 4, 5]  # the quoted body spans lines 2-3
    assert gift.description.splitlines()[1] == "Les cartes cadeaux sont envoyées par email directement."
    assert gift.price == Decimal("10.00") and gift.currency == "EUR"


def test_kcohen_mangled_barcodes_warned() -> None:
    read, products = read_all("shopify/kcohen1997__product_template.csv")
    warnings = issues_of(read, IssueAction.WARNING)
    assert len(warnings) == 19  # 16 variant barcodes + 3 MPNs
    assert {w.field for w in warnings} == {"Variant Barcode", "Google Shopping / MPN"}
    assert warnings[0].row == 2 and warnings[0].value == "3.65275E+11"
    shirt = products[0]
    assert shirt.product_id == "example-shirt" and len(shirt.rows) == 12
    assert shirt.image_urls[0] == "https://burst.shopifycdn.com/photos/tshirts.jpg?width=1500"


def test_hirachu_2025_header_and_missing_image() -> None:
    read, products = read_all("shopify/hirachu__product_template_2025format.csv", default_currency="USD")
    assert [p.product_id for p in products] == ["physical-product-the-band-t-shirt"]
    assert products[0].title == "Physical Product \u201cThe Band\u201d T-Shirt"
    assert products[0].price == Decimal("19.99")
    [invalid] = issues_of(read, IssueAction.ROW_INVALID)
    assert (invalid.row, invalid.product_id, invalid.field) == (
        14,
        "digital-product-the-history-of-rock-music",
        "Product image URL",
    )
    assert invalid.reason == "main image missing"


def test_stoa_ragged_rows_are_all_named() -> None:
    read, products = read_all("shopify/stoa__product_template_2025format.csv")
    assert products == []
    ragged = issues_of(read, IssueAction.ROW_INVALID)
    assert [i.row for i in ragged] == list(range(2, 30))
    assert all(i.field == "(row)" for i in ragged)
    assert ragged[0].reason == "expected 57 fields as in the header, got 58"
    assert ragged[1].reason == "expected 57 fields as in the header, got 59"


def test_woocommerce_sample_folds_variations() -> None:
    path = "woocommerce/woocommerce_official_sample_products__2018_verbatim_via_classic-commerce_b3af5c808.csv"
    read, products = read_all(path, default_currency="USD")
    by_id = {p.product_id: p for p in products}
    assert "woo-vneck-tee-red" not in by_id  # variations are not products
    vneck, hoodie = by_id["woo-vneck-tee"], by_id["woo-hoodie"]
    assert vneck.attributes["variants"] == "3" and hoodie.attributes["variants"] == "4"
    assert vneck.price == Decimal("20")  # variable parent without price: first variation's
    assert hoodie.rows == [3, 19, 20, 21, 26]
    assert (
        vneck.image_urls[0] == "https://woocommercecore.mystagingwebsite.com/wp-content/uploads/2017/12/vneck-tee-2.jpg"
    )
    assert len(vneck.image_urls) == 3
    assert by_id["woo-album"].price == Decimal("15")
    assert by_id["logo-collection"].price is None
    assert read.issues == []


def test_woocommerce_russian_headers_bom_after_junk() -> None:
    read, products = read_all("woocommerce/artur8800-shop__wc-product-export_ru-localized.csv", default_currency="RUB")
    assert read.header_line == 2 and read.headers[0] == "ID" and read.headers[2] == "Артикул"
    by_id = {p.product_id: p for p in products}
    first = by_id["id:40"]
    assert first.price == Decimal("240") and first.currency == "RUB"
    assert first.category == "Женская одежда"
    assert len(first.image_urls) == 5
    assert first.image_urls[1] == "http://localhost/dorechi_final/wp-content/uploads/2019/02/popular-1.png"
    assert by_id["id:140"].attributes["Опубликован"] == "-1"  # Excel guard '-1 stripped
    mixed = issues_of(read, IssueAction.WARNING)
    assert [i.row for i in mixed] == [3, 4] and "ОSТДЕЛКОЙ" in mixed[0].reason


def test_woocommerce_vinoteka_missing_images_and_lookalike() -> None:
    read, products = read_all("woocommerce/vinoteka-15-milja__woocommerce-products.csv")
    missing = issues_of(read, IssueAction.ROW_INVALID)
    assert [i.row for i in missing] == [159, 212, 360, 363, 364]
    [lookalike] = issues_of(read, IssueAction.WARNING)
    assert lookalike.row == 205 and lookalike.product_id == "zlatna-vrbnick-zlahtina-zlatna"
    first = products[0]
    assert first.image_urls == ["https://15milja.com/images/wines/aleksandrovi%C4%87-harizma.png"]
    assert first.price == Decimal("1770") and first.currency is None


def test_merchant_center_wix_feed() -> None:
    read, products = read_all("google_merchant/wix-ucp-tpa__data_products-feed.tsv")
    assert read.delimiter == "\t"
    cone = products[0]
    assert cone.image_urls == [
        "https://static.wixstatic.com/media/11062b_723b720fab234a8f984ea3956739a9ab~mv2.jpg"
        "/v1/fit/w_1920,h_1920,q_90/file.jpg"
    ]
    assert (cone.price, cone.currency, cone.brand) == (Decimal("4.00"), "USD", "Pop Stop Drink")
    assert cone.link == "https://www.popstopdrink.com/product-page/cone-crusher"


def test_merchant_center_arabic_feed() -> None:
    _, products = read_all("google_merchant/m5zoon__google_merchant_feed.tsv")
    perfume = products[0]
    assert (perfume.price, perfume.currency) == (Decimal("352"), "AED")
    assert perfume.title == "عطر كوكو شانيل 100 مل"
    assert perfume.link is not None and perfume.link.isascii()
    assert perfume.link.startswith("https://emirates-gifts.vercel.app/products/%D8%B9%D8%B7%D8%B1-")
    assert perfume.attributes["sale_price"] == "252 AED"


def test_non_spec_feed_reads_as_generic() -> None:
    read, products = read_all("google_merchant/m5zoon__public_feeds_merchant-feed-ar.csv")
    assert read.format == "generic" and len(products) == 263 and not read.stop_import
    perfume = products[0]
    assert (perfume.product_id, perfume.rows) == ("perfume_1", [2])
    assert perfume.title == "عطر كوكو شانيل 100 مل"
    assert (perfume.price, perfume.currency) == (Decimal("352"), "AED")  # Price, not Sale_Price
    assert perfume.image_urls == ["https://m5zoon.com/public/uploads/products/1722352332177124.webp"]
    assert perfume.link == "https://emirates-gifts.arabsad.com/products/perfume_1"
    assert (perfume.category, perfume.brand) == ("Perfumes", "Perfumes")
    assert perfume.attributes == {"Sale_Price": "252 AED", "Availability": "in stock"}
    [guess] = read.issues  # one header-level warning, nothing per row
    assert (guess.row, guess.product_id, guess.field, guess.action) == (None, None, "(header)", IssueAction.WARNING)
    assert guess.value == "ID, Image, URL"
    assert "'ID' as product_id" in guess.reason and "'Image' as image_url" in guess.reason
    assert "'URL' as link" in guess.reason and "Title" not in guess.reason  # exact names are no guess


def test_non_spec_feed_mapping_still_wins() -> None:
    read, products = read_all("google_merchant/m5zoon__public_feeds_merchant-feed-ar.csv", mapping=AR_FEED_MAPPING)
    assert read.format == "mapped" and len(products) == 263 and read.issues == []
    assert (products[0].product_id, products[0].price, products[0].currency) == ("perfume_1", Decimal("252"), "AED")
