"""Output conventions: `--json` prints one JSON object with stable keys; humans get rich tables.

Exit codes: 0 ok, 1 failure, 2 bad usage or bad input, 3 timed out (`run --wait --timeout`), 4 the
database cannot be used now (unreachable, or refusing writes): nothing was written, try again later.
"""

from __future__ import annotations

import json
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from contracts.tenant_text import escaped_json, shown

EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
EXIT_TIMEOUT = 3
EXIT_UNAVAILABLE = 4

console = Console()
err_console = Console(stderr=True)


def emit_json(obj: Any) -> None:
    """One JSON object; a control, bidi or lone surrogate character in a string is written as its
    JSON escape (the same value, nothing for a terminal to obey)."""
    typer.echo(escaped_json(json.dumps(obj, ensure_ascii=False, default=str, sort_keys=False)))


def said(value: object) -> str:
    """Text from outside (a tenant's plan or catalog, a provider's answer) for a rich table cell or a
    printed line: its control and bidi characters shown as escapes (contracts/tenant_text.py), its
    brackets as written, never read as markup."""
    return escape(shown(str(value)))


def fail(message: str, code: int = EXIT_FAILURE, *, as_json: bool = False, **extra: Any) -> NoReturn:
    if as_json:
        emit_json({"error": message, **extra})
    else:
        err_console.print(f"[bold red]error:[/] {said(message)}")  # a message may hold [brackets], or tenant text
    raise typer.Exit(code)
