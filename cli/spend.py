"""`reelqueue spend [IMPORT_ID]`: what imports cost, what was wasted and why (schema/spend.py)."""

from __future__ import annotations

from decimal import Decimal

import typer
from rich.table import Table

from cli.output import EXIT_BAD_INPUT, console, emit_json, fail
from config.settings import get_settings
from schema.db import Database
from schema.spend import WASTE_CAUSES, Spend

FIGURES = ("reserved", "settled", "released", "refunded", "adjustments", "charged", "held")


def spend(
    import_id: str | None = typer.Argument(None, help="one import (default: every import, newest first)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Credits of an import from the ledger: reserved, settled, released, adjustments, waste by cause,
    and the cost per SUCCEEDED and per approved video."""
    from sqlalchemy import select

    from schema.models import CatalogImport
    from schema.spend import import_spend

    with Database(get_settings().database_url).transaction() as session:
        ids = [import_id] if import_id else list(session.scalars(
            select(CatalogImport.id).order_by(CatalogImport.created_at.desc(), CatalogImport.id)))
        found = import_spend(session, ids)
    if import_id and import_id not in found:
        fail(f"no import {import_id}", EXIT_BAD_INPUT, as_json=as_json)
    spends = [found[i] for i in ids if i in found]
    if as_json:
        emit_json(spends[0].as_json() if import_id else {"imports": [s.as_json() for s in spends]})
    elif import_id:
        _print_one(spends[0])
    else:
        _print_many(spends)


def _credits(amount: Decimal | None) -> str:
    return "-" if amount is None else f"{amount.normalize():f}"


def _print_one(s: Spend) -> None:
    table = Table("credits", "amount", title=f"spend of {s.import_id}")
    for name in FIGURES:
        table.add_row(name, _credits(getattr(s, name)))
    for cause in WASTE_CAUSES:
        table.add_row(f"wasted: {cause}", _credits(s.wasted[cause]))
    table.add_row("wasted in all", _credits(s.wasted_total))
    table.add_row(f"per SUCCEEDED video ({s.succeeded})", _credits(s.cost_per_succeeded))
    table.add_row(f"per approved video ({s.approved})", _credits(s.cost_per_approved))
    console.print(table)


def _print_many(spends: list[Spend]) -> None:
    table = Table("import", "reserved", "charged", "held", "wasted", "succeeded", "per video", "approved",
                  "per approved", title="spend by import")
    table.columns[0].no_wrap = True
    for s in spends:
        table.add_row(s.import_id, _credits(s.reserved), _credits(s.charged), _credits(s.held),
                      _credits(s.wasted_total), str(s.succeeded), _credits(s.cost_per_succeeded), str(s.approved),
                      _credits(s.cost_per_approved))
    console.print(table)
