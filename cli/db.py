"""`reelqueue db upgrade`: the ledger's migrations as a command (a one-shot job before a deploy)."""

from __future__ import annotations

import typer

from cli.output import console, emit_json, fail
from config.settings import get_settings

db_app = typer.Typer(help="The ledger's Postgres database.", no_args_is_help=True)


@db_app.command("upgrade")
def upgrade(
    revision: str = typer.Argument("head", help="the migration to bring the schema to"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Apply the ledger's migrations up to REVISION; safe to repeat and to run from several processes
    at once (they take turns on an advisory lock). A database a later release has already migrated
    is left alone, exit 0: an older build's pods still start while its pinned runs drain."""
    from schema import migrate

    try:
        done = migrate.upgrade_to(get_settings().database_url, revision)
    except migrate.UnknownRevision as exc:
        fail(str(exc), as_json=as_json)
    if as_json:
        emit_json({"from": done.before, "to": done.after, "head": done.head, "changed": done.before != done.after,
                   "newer": done.newer})
    elif done.newer:
        console.print(f"ledger schema at {done.after}, newer than this build's head {done.head} (a later release "
                      "migrated it): nothing to do; releases keep their migrations backward compatible for one "
                      "release, so this build runs on it")
    elif done.before != done.after:
        console.print(f"ledger schema: {done.before or 'empty'} -> {done.after}")
    else:
        console.print(f"ledger schema already at {done.after}")
