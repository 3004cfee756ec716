"""The validation report of one read: issues as they are found, product-id bookkeeping, counters.

Issues are appended while the products generator runs, so the report is complete only once that
generator is exhausted. Memory is bounded by the number of issues and distinct product ids (the
duplicate check needs the ids), never by the number of rows.
"""

from __future__ import annotations

from catalog.readers.cells import is_identifier_header, is_mangled_number
from catalog.records import ISSUE_FIELD_CHARS, PRODUCT_ID_CHARS, Issue, IssueAction

VALUE_PREVIEW = 200  # issue values are for humans; a whole HTML body helps nobody


class Report:
    def __init__(self, headers: list[str]) -> None:
        self.issues: list[Issue] = []
        self.rows = 0  # data records read (blank lines excluded, ragged ones included)
        self.products_seen = 0  # distinct non-empty product ids met, valid or not
        self.products_emitted = 0  # valid products handed to the caller
        self._first_line: dict[str, int] = {}
        self._identifier_columns = [(i, h) for i, h in enumerate(headers) if is_identifier_header(h)]

    def note(
        self,
        row: int | None,
        field: str,
        value: str,
        reason: str,
        action: IssueAction,
        product_id: str | None = None,
    ) -> None:
        self.issues.append(
            Issue(
                row=row,
                product_id=(product_id or "")[:PRODUCT_ID_CHARS] or None,
                field=field[:ISSUE_FIELD_CHARS],
                value=value[:VALUE_PREVIEW],
                reason=reason,
                action=action,
            )
        )

    def reject_row(self, row: int, value: str, reason: str) -> None:
        """A record that cannot be interpreted at all (ragged, unreadable)."""
        self.note(row, "(row)", value, reason, IssueAction.ROW_INVALID)

    def claim(self, product_id: str, row: int, field: str) -> bool:
        """Register a new product; False (with a STOP_IMPORT issue) if its id is empty or taken, or
        (ROW_INVALID) longer than a product id may be."""
        if not product_id:
            self.note(row, field, "", "product id is empty", IssueAction.STOP_IMPORT)
            return False
        if len(product_id) > PRODUCT_ID_CHARS:
            reason = f"product id has {len(product_id)} characters; at most {PRODUCT_ID_CHARS}"
            self.note(row, field, product_id, reason, IssueAction.ROW_INVALID)
            return False
        first = self._first_line.get(product_id)
        if first is not None:
            reason = f"product id duplicated: already used by the product on line {first}"
            self.note(row, field, product_id, reason, IssueAction.STOP_IMPORT, product_id)
            return False
        self._first_line[product_id] = row
        self.products_seen += 1
        return True

    def scan_identifiers(self, cells: list[str], row: int, product_id: str) -> None:
        """Warn about identifier cells a spreadsheet turned into floats (3.65275E+11)."""
        for index, header in self._identifier_columns:
            value = cells[index].strip()
            if is_mangled_number(value):
                reason = "looks spreadsheet-mangled (scientific notation): original digits are lost"
                self.note(row, header, value, reason, IssueAction.WARNING, product_id)

    @property
    def stop_import(self) -> bool:
        """Seed 000: an empty or duplicated product id means nothing from this file is expanded."""
        return any(issue.action is IssueAction.STOP_IMPORT for issue in self.issues)
