"""The `reelqueue` command line (typer): start workflows from catalogs, inspect and cancel tasks."""

from __future__ import annotations

import os
from enum import StrEnum

import typer

from cli import commands, delivery, imports, operations
from cli.db import db_app
from cli.dev import demo, dev_app
from cli.drill import drill
from cli.providers import providers_app
from cli.review import overview, review
from cli.secrets import secrets_app
from cli.spend import spend
from cli.storage import storage_app
from cli.temporal import temporal_app
from cli.tenants import tenants_app

app = typer.Typer(help="reelqueue: product catalogs to stored, transcoded videos through durable workflows.",
                  no_args_is_help=True)
app.command("demo")(demo)
app.add_typer(dev_app, name="dev")
app.command("import")(commands.import_catalog)
app.command("run")(commands.run)
app.command("status")(commands.status)
app.command("tasks")(commands.tasks)
app.command("show")(commands.show)
app.command("cancel")(commands.cancel)
app.command("imports")(imports.imports)
app.command("pause")(imports.pause)
app.command("resume")(imports.resume)
app.command("retry")(commands.retry)
app.add_typer(operations.ledger_app, name="ledger")
app.command("attention")(operations.attention)
app.command("resolve")(operations.resolve)
app.command("renditions")(operations.renditions)
app.command("drill")(drill)
app.command("export")(delivery.export)
app.command("gc")(delivery.gc)
app.command("review")(review)
app.command("overview")(overview)
app.command("spend")(spend)
app.add_typer(providers_app, name="providers")
app.add_typer(secrets_app, name="secrets")
app.add_typer(temporal_app, name="temporal")
app.add_typer(db_app, name="db")
app.add_typer(storage_app, name="storage")
app.add_typer(tenants_app, name="tenants")


class LogFormatChoice(StrEnum):
    json = "json"
    text = "text"


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"reelqueue {package_version()}")
        raise typer.Exit()


def package_version() -> str:
    """The installed distribution's version (pyproject.toml's, once installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("reelqueue")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


@app.callback()
def _options(
    _version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                  help="print the version and exit"),
    log_format: LogFormatChoice = typer.Option(LogFormatChoice.text, "--log-format",
                                               help="stderr log lines (docs/observability.md)"),
) -> None:
    """The CLI reports problems in its own output (tables, reports, --json); library warnings such as
    fetch refusals are already in the validation report, so only errors reach stderr by default."""
    from config.settings import Settings
    from telemetry.logs import configure_logging
    from telemetry.tracing import setup_tracing

    try:
        settings = Settings()
    except ValueError:  # an unusable variable: the command itself reports it
        settings = None
    configure_logging("cli", log_format.value, level=os.environ.get("REELQUEUE_LOG_LEVEL", "ERROR"),  # type: ignore[arg-type]
                      settings=settings)
    setup_tracing("cli")



def main() -> None:
    """`reelqueue`: the app, ended with the command's own exit status (cli/exiting.py)."""
    from cli.exiting import run_and_exit

    run_and_exit(_run)


def _run() -> None:
    """The app, with unreachable services reported in one line instead of a traceback (and, when no
    stack was found at all, how to start one)."""
    from rich.markup import escape
    from sqlalchemy.exc import OperationalError
    from urllib3.exceptions import MaxRetryError

    from adapters.temporal_client import TemporalConfigError
    from cli.output import EXIT_FAILURE, EXIT_UNAVAILABLE, err_console
    from config.settings import no_stack_hint
    from delivery.links import LinkError

    try:
        app()
    except (LinkError, OperationalError, TemporalConfigError, MaxRetryError, RuntimeError) as exc:
        if isinstance(exc, RuntimeError) and "connect" not in str(exc).lower():
            raise
        hint = None if isinstance(exc, (LinkError, TemporalConfigError)) else no_stack_hint()
        err_console.print(f"[bold red]error:[/] {escape(hint or _unreachable(exc))}", soft_wrap=True)
        raise SystemExit(EXIT_UNAVAILABLE if isinstance(exc, OperationalError) and not hint else EXIT_FAILURE) from None
    raise SystemExit(EXIT_FAILURE)


def database_refusal(exc: Exception) -> str:
    """One line naming the database and why it cannot be used; the command wrote nothing (exit 4)."""
    from config.settings import Settings
    from schema.db import database_name, database_unavailable

    why = database_unavailable(exc) or "the database failed"
    cause = str(getattr(exc, "orig", exc)).strip().splitlines()
    detail = f" ({cause[0][:200]})" if cause else ""
    return (f"{why}: Postgres at {database_name(Settings().database_url)}{detail}; nothing was written, "
            "try again once it answers (reelqueue dev status)")


def _unreachable(exc: Exception) -> str:
    """A stack was found (or configured) but one of its services does not answer."""
    from sqlalchemy.exc import OperationalError
    from urllib3.exceptions import MaxRetryError

    from adapters.temporal_client import TemporalConfigError
    from delivery.links import LinkError

    if isinstance(exc, LinkError):  # `show` / `export` asked for media links with no key to sign them
        return f"{exc}; start the stack (reelqueue dev up) or set it"
    if isinstance(exc, OperationalError):
        return database_refusal(exc)
    if isinstance(exc, TemporalConfigError):  # a TEMPORAL_* variable or profile file that cannot be used
        return f"{exc} (docs/deploy.md, \"Temporal\")"
    if isinstance(exc, MaxRetryError):
        return f"cannot reach object storage ({exc.reason}); is the stack up?"
    return f"cannot reach Temporal ({exc}); is the stack up?"


if __name__ == "__main__":
    main()
