"""A product being assembled from one or more rows; cleans each cell and notes what it repaired.

All formats fill products through these setters, so a price, an image list or an HTML body is
cleaned (and reported) the same way whatever the export it came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from catalog.readers.cells import clean_text, html_to_text, mixed_script_words, normalize_url, split_urls
from catalog.readers.prices import parse_price
from catalog.readers.report import Report
from catalog.records import MAX_PRICE, IssueAction, ProductRecord


@dataclass
class ProductDraft:
    product_id: str
    row: int  # first line of the product in the file
    report: Report
    title: str = ""
    description: str = ""
    images: list[str] = field(default_factory=list)
    variant_images: list[str] = field(default_factory=list)  # after the gallery: a fallback main image
    price: Decimal | None = None
    currency: str | None = None
    category: str | None = None
    brand: str | None = None
    link: str | None = None
    rows: list[int] = field(default_factory=list)
    attributes: dict[str, str] = field(default_factory=dict)
    variants: int = 0  # Shopify variant rows / WooCommerce variations folded in
    invalid: bool = False

    def __post_init__(self) -> None:
        self.rows.append(self.row)

    def _note(self, row: int, header: str, value: str, reason: str, action: IssueAction) -> None:
        self.report.note(row, header, value, reason, action, self.product_id)

    def set_title(self, cell: str, row: int, header: str) -> None:
        self.title = clean_text(cell)
        if words := mixed_script_words(self.title):
            reason = f"mixes Latin and Cyrillic letters in {', '.join(words)}: probably a look-alike typo"
            self._note(row, header, self.title, reason, IssueAction.WARNING)

    def set_description(self, cell: str, row: int, header: str, *, html_column: bool = False) -> None:
        """Plain text of the cell; markup in a column meant to be plain text is noted as repaired.

        Shopify and WooCommerce bodies are HTML by design, so converting them is routine, not news.
        """
        self.description, had_markup = html_to_text(cell)
        if had_markup and not html_column:
            self._note(row, header, cell, "HTML converted to plain text", IssueAction.NORMALIZED)

    def add_images(self, cell: str, row: int, header: str, *, variant: bool = False) -> None:
        """Append every valid URL of the cell; an invalid one is dropped with a REJECTED issue."""
        target = self.variant_images if variant else self.images
        for part in split_urls(cell):
            url = normalize_url(part)
            if url is None:
                self._note(row, header, part, "not an http(s) URL or a relative path", IssueAction.REJECTED)
            elif url not in target:
                target.append(url)

    def set_price(self, cell: str, row: int, header: str, default_currency: str | None) -> None:
        """Take the first readable price; later cells are only read while none has been found."""
        if self.price is not None or not cell:
            return
        parsed = parse_price(cell, default_currency)
        if parsed.error:
            self._note(row, header, cell, f"price unreadable ({parsed.error}); dropped", IssueAction.REJECTED)
            return
        if abs(parsed.amount) > MAX_PRICE:
            self._note(row, header, cell, f"price too large (at most {MAX_PRICE:f}); dropped", IssueAction.REJECTED)
            return
        if parsed.note:
            self._note(row, header, cell, f"price normalized: {parsed.note}", IssueAction.NORMALIZED)
        self.price, self.currency = parsed.amount, parsed.currency

    def set_link(self, cell: str, row: int, header: str) -> None:
        if not cell:
            return
        self.link = normalize_url(cell)
        if self.link is None:
            self._note(row, header, cell, "not an http(s) URL or a relative path", IssueAction.REJECTED)

    def keep(self, header: str, value: str) -> None:
        if value and header not in self.attributes:
            self.attributes[header] = value

    def reject(self, row: int, header: str, value: str, reason: str) -> None:
        """The product makes no task (row invalid); it is not emitted."""
        self._note(row, header, value, reason, IssueAction.ROW_INVALID)
        self.invalid = True

    def finish(self, image_header: str) -> ProductRecord | None:
        """The record to emit, or None when the product is invalid (issue already noted)."""
        images = self.images + [url for url in self.variant_images if url not in self.images]
        if not images and not self.invalid:
            self.reject(self.row, image_header, "", "main image missing")
        if self.invalid:
            return None
        self.report.products_emitted += 1
        if self.variants:
            self.attributes.setdefault("variants", str(self.variants))
        return ProductRecord(
            product_id=self.product_id,
            title=self.title,
            description=self.description,
            image_urls=images,
            price=self.price,
            currency=self.currency,
            category=self.category or None,
            brand=self.brand or None,
            link=self.link,
            rows=sorted(self.rows),
            attributes=self.attributes,
        )
