"""The one error a reader raises: the file is not a catalog we can read (the CLI exits with 2)."""

from __future__ import annotations


class CatalogFormatError(Exception):
    """Neither format detection nor the mapping fits the file's header row.

    Row-level problems never raise: they become `Issue`s. This is only for "cannot start".
    """

    def __init__(self, message: str, headers_found: list[str], missing_fields: list[str]) -> None:
        super().__init__(message)
        self.message = message
        self.headers_found = headers_found
        self.missing_fields = missing_fields
