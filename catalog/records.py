"""The boundary between catalog readers and the rest of the system.

A reader (one per export format) turns a file into normalized `ProductRecord`s plus `Issue`s.
Everything downstream (validation against the plan, expansion, the database) sees only these.
"""

from __future__ import annotations

from decimal import Decimal
from enum import StrEnum

from pydantic import BaseModel, Field

# The sizes of the columns these land in (schema/models.py: products, validation_issues): a value past
# one is an issue of its row, never a database error.
PRODUCT_ID_CHARS = 300
ISSUE_FIELD_CHARS = 100
MAX_PRICE = Decimal("99999999999999.999999")  # Numeric(20, 6)


class IssueAction(StrEnum):
    """The queue action of import's validation table (README, "Catalog formats")."""

    STOP_IMPORT = "stop_import"  # product id empty or duplicated: nothing is expanded
    ROW_INVALID = "row_invalid"  # e.g. main image missing: the product makes no task
    COPY_REVIEW = "copy_review"  # text longer than the template allows
    EXPANSION_INVALID = "expansion_invalid"  # unsupported locale: those tasks are not made
    NORMALIZED = "normalized"  # value repaired (price with symbol, HTML to text): kept, noted
    REJECTED = "rejected"  # value could not be repaired; the field is dropped
    HUMAN_REVIEW = "human_review"  # e.g. image unreachable after retries
    WARNING = "warning"  # worth a look, changes nothing (spreadsheet-mangled number)


class Issue(BaseModel):
    row: int | None = None  # 1-based line number of the record's first line in the file
    product_id: str | None = None
    field: str
    value: str = ""
    reason: str
    action: IssueAction


class ProductRecord(BaseModel):
    product_id: str
    title: str = ""
    description: str = ""  # plain text (HTML already stripped)
    image_urls: list[str] = Field(default_factory=list)  # first is the main image; may be relative paths
    price: Decimal | None = None
    currency: str | None = None
    category: str | None = None
    brand: str | None = None
    link: str | None = None
    rows: list[int] = Field(default_factory=list)  # file line numbers this product came from
    attributes: dict[str, str] = Field(default_factory=dict)  # anything else worth keeping

    @property
    def main_image(self) -> str | None:
        return self.image_urls[0] if self.image_urls else None
