"""`reelqueue tenants ...`: tenants of the HTTP API and their keys (printed once, stored hashed)."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import TypeVar

import typer
from rich.table import Table

from cli.output import EXIT_BAD_INPUT, console, emit_json, fail
from config.settings import get_settings
from schema import tenants
from schema.db import Database

tenants_app = typer.Typer(help="Tenants of the HTTP API (/v1): limits and API keys.", no_args_is_help=True)
keys_app = typer.Typer(help="A tenant's API keys: list, create, rotate, revoke.", no_args_is_help=True)
tenants_app.add_typer(keys_app, name="keys")
T = TypeVar("T")


def _in_transaction(work: Callable[..., T], *args: object, as_json: bool) -> T:
    """Run `work(session, *args)` in one transaction; a refused operation exits 2 with its reason."""
    try:
        with Database(get_settings().database_url).transaction() as session:
            return work(session, *args)
    except tenants.TenantError as exc:
        fail(str(exc), EXIT_BAD_INPUT, as_json=as_json)


def _print_issued(key: tenants.IssuedKey, as_json: bool, **extra: object) -> None:
    if as_json:
        emit_json({**extra, **key.model_dump(mode="json")})
        return
    for name, value in extra.items():
        console.print(f"{name}: {value}")
    console.print(f"tenant: {key.tenant_id}\nkey id: {key.key_id}\napi key: [bold]{key.api_key}[/]\n"
                  "(shown once: only its hash is stored)")


@tenants_app.command("create")
def create(
    name: str = typer.Argument(..., help="tenant id: lower-case letters, digits, '-', '_'"),
    credits: float = typer.Option(1000.0, "--credits", min=0, help="credit limit"),
    max_concurrent: int = typer.Option(10, "--max-concurrent", min=1, help="tasks past admission at once"),
    rate_per_minute: int = typer.Option(600, "--rate-per-minute", min=1, help="API requests per minute"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Create a tenant and print its first API key (once)."""
    limits = tenants.TenantLimits(credits=Decimal(str(credits)), max_concurrent=max_concurrent,
                                  rate_per_minute=rate_per_minute)
    issued = _in_transaction(tenants.create_tenant, name, limits, as_json=as_json)
    _print_issued(issued, as_json, credits=float(limits.credits), max_concurrent=max_concurrent,
                  rate_per_minute=rate_per_minute)


@keys_app.command("list")
def list_keys(tenant: str | None = typer.Argument(None, help="only this tenant's keys"),
              as_json: bool = typer.Option(False, "--json")) -> None:
    """Keys by id and prefix (never the key itself), with when they were revoked."""
    keys = _in_transaction(tenants.list_keys, tenant, as_json=as_json)
    if as_json:
        emit_json({"keys": [k.model_dump(mode="json") for k in keys]})
        return
    table = Table("key id", "tenant", "prefix", "created", "revoked")
    for k in keys:
        table.add_row(k.key_id, k.tenant_id, k.prefix + "...", f"{k.created_at:%Y-%m-%d %H:%M}",
                      f"{k.revoked_at:%Y-%m-%d %H:%M}" if k.revoked_at else "")
    console.print(table)


@keys_app.command("create")
def create_key(tenant: str = typer.Argument(...), as_json: bool = typer.Option(False, "--json")) -> None:
    """Another key for the tenant (both work until one is revoked)."""
    _print_issued(_in_transaction(tenants.issue_key, tenant, as_json=as_json), as_json)


@keys_app.command("rotate")
def rotate(key_id: str = typer.Argument(...), as_json: bool = typer.Option(False, "--json")) -> None:
    """A new key for the same tenant; the old one is revoked at once."""
    _print_issued(_in_transaction(tenants.rotate_key, key_id, as_json=as_json), as_json, revoked=key_id)


@keys_app.command("revoke")
def revoke(key_id: str = typer.Argument(...), as_json: bool = typer.Option(False, "--json")) -> None:
    """The key answers 401 from now on."""
    info = _in_transaction(tenants.revoke_key, key_id, as_json=as_json)
    if as_json:
        emit_json(info.model_dump(mode="json"))
    else:
        console.print(f"{info.key_id} ({info.tenant_id}) revoked at {info.revoked_at:%Y-%m-%d %H:%M:%S}")
