"""`reelqueue db upgrade`: the ledger's migrations as a command (a one-shot job before a deploy)."""

from __future__ import annotations

import typer

from cli.output import console, emit_json
from config.settings import get_settings

db_app = typer.Typer(help="The ledger's Postgres database.", no_args_is_help=True)


@db_app.command("upgrade")
def upgrade(
    revision: str = typer.Argument("head", help="the migration to bring the schema to"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Apply the ledger's migrations up to REVISION; safe to repeat and to run from several processes
    at once (they take turns on an advisory lock)."""
    from schema import migrate

    url = get_settings().database_url
    before = migrate.current_revision(url)
    migrate.upgrade(url, revision)
    after = migrate.current_revision(url)
    if as_json:
        emit_json({"from": before, "to": after, "head": migrate.head_revision(), "changed": before != after})
        return
    console.print(f"ledger schema: {before or 'empty'} -> {after}" if before != after
                  else f"ledger schema already at {after}")
