"""The commands on a whole import: `imports`, `pause`, `resume` (and `cancel --import`, in cli/commands.py)."""

from __future__ import annotations

import asyncio

import typer
from rich.table import Table

from cli.operations import user_name
from cli.output import EXIT_BAD_INPUT, console, emit_json, fail, said
from config.settings import get_settings
from schema.db import Database


def imports(as_json: bool = typer.Option(False, "--json")) -> None:
    """Every import, newest first: catalog, plan, created, tasks by status, credits."""
    from control.import_steering import list_imports

    rows = list_imports(Database(get_settings().database_url))
    if as_json:
        emit_json({"imports": [r.model_dump(mode="json") for r in rows]})
        return
    table = Table("id", "catalog", "plan", "created", "tasks", "by status", "credits", title=f"imports: {len(rows)}")
    table.columns[0].no_wrap = True
    for r in rows:
        statuses = ", ".join(f"{s} {n}" for s, n in sorted(r.by_status.items()))
        credits = ", ".join(f"{k.lower()} {v:g}" for k, v in sorted(r.credits.items()))
        paused = f" [yellow](paused by {said(r.paused_by)})[/]" if r.paused_by else ""
        table.add_row(r.id, f"{said(r.catalog)} v{r.version}{paused}", said(r.plan),
                      r.created_at.strftime("%Y-%m-%d %H:%M"), str(r.tasks), statuses or "-", credits or "-")
    console.print(table)


def pause(
    import_id: str = typer.Argument(..., help="the import to hold"),
    reason: str = typer.Option("", "--reason"),
    by: str | None = typer.Option(None, "--by", help="who pauses (default: your user name)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Hold an import: its tasks not yet submitted wait (holding no slot); jobs already running finish."""
    _set_paused(import_id, paused=True, reason=reason, by=by, as_json=as_json)


def resume(
    import_id: str = typer.Argument(..., help="a paused import"),
    reason: str = typer.Option("", "--reason"),
    by: str | None = typer.Option(None, "--by", help="who resumes (default: your user name)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Let a paused import's tasks go on (each keeps its first place in its provider's line)."""
    _set_paused(import_id, paused=False, reason=reason, by=by, as_json=as_json)


def _set_paused(import_id: str, *, paused: bool, reason: str, by: str | None, as_json: bool) -> None:
    from adapters.temporal_client import connect
    from control.import_steering import set_paused
    from schema import queries

    settings = get_settings()
    db = Database(settings.database_url)
    with db.transaction() as session:
        if not queries.import_exists(session, import_id):
            fail(f"no import {import_id}", EXIT_BAD_INPUT, as_json=as_json)

    async def go():  # noqa: ANN202
        return await set_paused(await connect(settings), db, import_id, paused=paused, by=by or user_name(),
                                reason=reason)

    outcome = asyncio.run(go())
    if as_json:
        emit_json(outcome.model_dump(mode="json"))
        return
    state = "paused" if paused else "resumed"
    already = "" if outcome.changed else f" (it already was {state})"
    console.print(f"import {import_id} {state} by {outcome.by}{already}: {outcome.told} running workflows told, "
                  f"{outcome.not_running} tasks not running")
