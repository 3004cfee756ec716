"""The `reelqueue` command line (typer): start workflows from catalogs, inspect and cancel tasks."""

from __future__ import annotations

import typer

from cli import commands
from cli.dev import demo, dev_app

app = typer.Typer(help="reelqueue: product catalogs to stored, transcoded videos through durable workflows.",
                  no_args_is_help=True, add_completion=False)
app.command("demo")(demo)
app.add_typer(dev_app, name="dev")
app.command("import")(commands.import_catalog)
app.command("run")(commands.run)
app.command("status")(commands.status)
app.command("tasks")(commands.tasks)
app.command("show")(commands.show)
app.command("cancel")(commands.cancel)

if __name__ == "__main__":
    app()
