"""`reelqueue temporal setup`: prepare the Temporal namespace this deployment connects to."""

from __future__ import annotations

import asyncio

import typer

from cli.output import EXIT_FAILURE, console, emit_json, fail
from config.settings import get_settings

temporal_app = typer.Typer(help="The Temporal cluster this deployment connects to (docs/deploy.md).",
                           no_args_is_help=True)


@temporal_app.command("setup")
def setup(
    create_namespace: bool = typer.Option(
        False, "--create-namespace", help="self-hosted: register the namespace when it does not exist"),
    retention_days: int = typer.Option(30, "--retention-days", min=1, help="of a namespace this creates"),
    wait: float = typer.Option(0.0, "--wait", min=0, help="seconds to keep trying while the server does not answer"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Check the namespace exists and register the search attributes the workflows use; safe to repeat.

    Exits 1 when something is still missing (on Temporal Cloud without leave to add attributes it
    prints the commands that add them)."""
    from control.temporal_setup import TemporalSetupError, setup_temporal

    try:
        report = asyncio.run(setup_temporal(get_settings(), create_namespace=create_namespace,
                                            retention_days=retention_days, wait_s=wait))
    except TemporalSetupError as exc:
        fail(str(exc), as_json=as_json)
    if as_json:
        emit_json(report.model_dump(mode="json"))
    else:
        _print(report)
    if not report.ok:
        raise typer.Exit(EXIT_FAILURE)


def _print(report) -> None:  # noqa: ANN001 - control.temporal_setup.TemporalSetupReport, imported lazily
    where = "Temporal Cloud" if report.cloud else "self-hosted"
    state = "created" if report.namespace_created else "exists"
    console.print(f"namespace {report.namespace} at {report.address} ({where}): {state}")
    console.print(f"search attributes present: {', '.join(report.present) or 'none'}")
    console.print(f"search attributes added: {', '.join(report.added) or 'none'}")
    if report.missing:
        console.print(f"[bold red]search attributes missing:[/] {', '.join(report.missing)} "
                      "(the server refused to add them); to add them:")
    for line in report.instructions:
        console.print(f"  {line}", soft_wrap=True, highlight=False)
