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


@temporal_app.command("promote")
def promote_build(
    build_id: str = typer.Argument(..., help="the build new workflow runs start on from now (the image tag)"),
    deployment_name: str = typer.Option("", "--deployment-name",
                                        help="default: REELQUEUE_WORKER_DEPLOYMENT_NAME"),
    wait: float = typer.Option(0.0, "--wait", min=0, help="seconds to keep trying while the build is unknown"),
    allow_no_pollers: bool = typer.Option(False, "--allow-no-pollers",
                                          help="promote a build none of whose workers polls yet"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Make BUILD_ID the current version of the Worker Deployment: new runs start there, pinned runs stay
    on the build they started on until they finish (docs/deploy.md, "Rolling deploys")."""
    from adapters.temporal_client import connect
    from control.worker_versions import PromotionError, promote

    settings = get_settings()
    name = deployment_name or settings.worker_deployment_name
    if not name:
        fail("no Worker Deployment: pass --deployment-name or set REELQUEUE_WORKER_DEPLOYMENT_NAME", 2,
             as_json=as_json)

    async def run() -> str | None:
        return await promote(await connect(settings), name, build_id, wait_s=wait, allow_no_pollers=allow_no_pollers)

    try:
        previous = asyncio.run(run())
    except PromotionError as exc:
        fail(str(exc), as_json=as_json)
    if as_json:
        emit_json({"deployment_name": name, "current": build_id, "previous": previous})
        return
    console.print(f"{name}: build {build_id} is current (was {previous or 'none'})")
