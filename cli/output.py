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

EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
EXIT_TIMEOUT = 3
EXIT_UNAVAILABLE = 4

console = Console()
err_console = Console(stderr=True)


def emit_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, ensure_ascii=False, default=str, sort_keys=False))


def fail(message: str, code: int = EXIT_FAILURE, *, as_json: bool = False, **extra: Any) -> NoReturn:
    if as_json:
        emit_json({"error": message, **extra})
    else:
        err_console.print(f"[bold red]error:[/] {escape(message)}")  # a message may hold [brackets]
    raise typer.Exit(code)
