"""`reelqueue providers [--json]` and `reelqueue providers check NAME`: which video providers this
configuration can use, and whether a key works."""

from __future__ import annotations

from typing import Any

import typer
from rich.table import Table

from cli.output import EXIT_BAD_INPUT, EXIT_FAILURE, console, emit_json, fail
from config.settings import get_settings

providers_app = typer.Typer(help="Video providers: configured or not, capabilities, limits, prices; check a key.",
                            invoke_without_command=True)


def _entries() -> dict[str, dict[str, Any]]:
    from adapters.providers import build_providers

    settings = get_settings()
    out = {}
    for name, provider in build_providers(settings).items():
        describe = getattr(provider, "describe", None)
        entry = describe() if describe else {
            "name": name, "configured": True, "missing_setting": None, "emulated": True,
            "base_url": settings.emulator_url, "api_version": "reelqueue emulator v1",
            "capabilities": provider.capabilities.model_dump(mode="json"), "cancel": "POST /v1/jobs/{id}/cancel",
            "prices_credits_per_s": {}}
        limits = settings.provider_limits.get(name)
        entry["limits"] = limits.model_dump(mode="json") if limits else None
        out[name] = entry
    return out


@providers_app.callback()
def list_providers(ctx: typer.Context, as_json: bool = typer.Option(False, "--json")) -> None:
    """Every provider, configured or not (without a key its tasks end INVALID naming the variable)."""
    if ctx.invoked_subcommand is not None:
        return
    entries = _entries()
    if as_json:
        emit_json({"providers": entries})
        return
    table = Table("provider", "configured", "base url", "ratios", "durations s", "models (credits/s)",
                  "reconcile", "webhooks", "min poll s")
    for name, e in entries.items():
        caps = e["capabilities"]
        durations = (_span(caps["durations_s"]) if caps["durations_s"]
                     else f"{caps['min_duration_s']:g}-{caps['max_duration_s']:g}")
        reconcile = ("by our id" if caps["reconcile_by_request_key"] else
                     "by listing" if caps["reconcile_by_list"] else "no (a person decides)")
        models = ", ".join(f"{m} ({p:g})" for m, p in e["prices_credits_per_s"].items()) or "any"
        configured = "[green]yes[/]" if e["configured"] else f"[red]no[/]: set {e['missing_setting']}"
        table.add_row(name, configured + (" (emulated)" if e["emulated"] and name != "emulator" else ""),
                      e["base_url"], " ".join(caps["aspect_ratios"]), durations, models, reconcile,
                      "yes" if caps["webhooks"] else "no", f"{caps['min_poll_interval_s']:g}")
    console.print(table)


def _span(values: list[float]) -> str:
    return f"{min(values):g}-{max(values):g}" if len(values) > 3 else ", ".join(f"{v:g}" for v in values)


@providers_app.command("check")
def check(name: str = typer.Argument(..., help="provider name, e.g. runway"),
          as_json: bool = typer.Option(False, "--json")) -> None:
    """One authenticated read-only call: does the key work, is the provider reachable?"""
    from adapters.providers import HOSTED, build_providers

    if name not in HOSTED:
        fail(f"provider: unknown hosted provider {name!r}; known: {', '.join(HOSTED)}", EXIT_BAD_INPUT,
             as_json=as_json)
    provider = build_providers(get_settings())[name]
    if provider.missing_setting:
        fail(f"{name} is not configured: set {provider.missing_setting}", EXIT_BAD_INPUT, as_json=as_json,
             missing_setting=provider.missing_setting)
    result = provider.check()
    if as_json:
        emit_json(result.model_dump(mode="json"))
    else:
        style = "green" if result.ok else "red"
        where = "reachable" if result.reachable else "NOT reachable"
        console.print(f"[{style}]{name}: {'ok' if result.ok else 'failed'}[/] ({where}) - {result.detail}")
    if not result.ok:
        raise typer.Exit(EXIT_FAILURE)
