"""`reelqueue dev up|down|status` and `reelqueue demo`: the embedded stack on this machine."""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import quote

import typer
from rich.table import Table

from cli.output import console, emit_json, fail
from config.settings import Settings

dev_app = typer.Typer(help="The embedded stack: Postgres, S3, Temporal + UI, emulator, gateway, worker.",
                      no_args_is_help=True)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _print_stack(stack, as_json: bool, **extra: object) -> None:  # noqa: ANN001 - devstack StackStatus
    data = stack.model_dump(mode="json") | extra
    if as_json:
        emit_json(data)
        return
    table = Table("service", "up", "pid", "url")
    for name, svc in data["services"].items():
        table.add_row(name, "[green]yes[/]" if svc["up"] else "[red]no[/]", str(svc["pid"] or "-"), svc["url"])
    console.print(table)
    for key, value in extra.items():
        console.print(f"{key.replace('_', ' ')}: {value if value is not None else 'off'}")


def bring_up(settings: Settings, services: list[str] | None = None, emulate_providers: bool | None = None) -> Settings:
    """Start the stack (idempotent), migrate the database; return settings that point at it."""
    import devstack
    from adapters.storage import ObjectStorage
    from schema.migrate import upgrade

    try:
        devstack.up(settings, services=services, emulate_providers=emulate_providers)
    except devstack.StackError as exc:
        fail(str(exc))
    fresh = Settings()
    upgrade(fresh.database_url)
    ObjectStorage.from_settings(fresh).ensure_bucket()
    return fresh


@dev_app.command("up")
def up(
    emulate_providers: bool | None = typer.Option(
        None, "--emulate-providers/--real-providers",
        help="point every provider whose REELQUEUE_<P>_BASE_URL is not set at the emulator's dialect "
             "(default: as the last `dev up` left it)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Start every service in the background (state under $REELQUEUE_HOME); safe to repeat."""
    import devstack

    settings = bring_up(Settings(), emulate_providers=emulate_providers)
    _print_stack(devstack.status(settings), as_json)


@dev_app.command("down")
def down(as_json: bool = typer.Option(False, "--json")) -> None:
    """Stop the processes `dev up` started (and only those)."""
    import devstack

    _print_stack(devstack.down(Settings()), as_json)


@dev_app.command("status")
def status(as_json: bool = typer.Option(False, "--json")) -> None:
    """Which services run, their pids and URLs, and where providers send webhooks (null: off)."""
    import devstack

    settings = Settings()
    current = devstack.effective_settings(settings)
    _print_stack(devstack.status(settings), as_json, webhook_url=current.webhook_url(current.provider),
                 emulate_providers=current.emulate_providers)


def demo(
    catalog: Path = typer.Option(EXAMPLES / "catalog.csv", "--catalog", help="catalog file"),
    plan: Path = typer.Option(EXAMPLES / "plan.toml", "--plan", help="production plan"),
    timeout: float = typer.Option(900, "--timeout", help="seconds to wait for the tasks"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """One command: start the stack, import the example catalog, run every task to the end."""
    import asyncio

    from catalog.importer import ImportRejected
    from catalog.plan import load_plan
    from catalog.service import run_import
    from cli.commands import wait_for_import
    from cli.starting import start_import_tasks
    from control.ledger_audit import audit_ledger
    from schema import queries
    from schema.db import Database

    started = time.monotonic()
    if not as_json:
        console.rule("reelqueue demo")
        console.print("starting the embedded stack (first run initialises Postgres, S3 and Temporal) ...")
    settings = bring_up(Settings())
    try:
        summary = run_import(settings, catalog, load_plan(plan))
    except ImportRejected as exc:
        fail(f"the example catalog was rejected: {exc}")
    db = Database(settings.database_url)
    with db.transaction() as session:
        total = queries.count_tasks(session, summary.import_id)
    if not as_json:
        console.print(f"imported {summary.products} products from {catalog.name} -> {summary.tasks} tasks "
                      f"({summary.tasks_new} new, {summary.tasks_reused} reused); import {summary.import_id}")
    starts = start_import_tasks(settings, db, summary.import_id, total, show=not as_json)
    counts = wait_for_import(db, summary.import_id, total, show=not as_json, timeout_s=timeout)
    with db.transaction() as session:
        sample = next(iter(queries.list_tasks(session, summary.import_id, "SUCCEEDED", 1)), None)
        detail = queries.task_detail(session, sample.id) if sample else None
        polls = queries.status_calls_per_task(session, summary.import_id)
    links = _sample_links(settings, detail)
    ledger = asyncio.run(audit_ledger(settings, summary.import_id))
    from adapters.temporal_client import namespace_of

    ui = (f"{settings.temporal_ui_url}/namespaces/{namespace_of(settings)}/workflows?query="
          + quote(f"ImportId=\"{summary.import_id}\""))
    result = {
        "import_id": summary.import_id, "tasks": total, "by_status": counts, **starts,
        "seconds": round(time.monotonic() - started, 1), "status_calls_per_task": polls, "temporal_ui": ui,
        "sample_task": sample.id if sample else None, **links,
        "ledger_ok": ledger.ok, "ledger_violations": [v.model_dump(mode="json") for v in ledger.violations],
    }
    if as_json:
        emit_json(result)
    else:
        _print_demo(result)
    if counts.get("SUCCEEDED", 0) != total or not ledger.ok:
        raise typer.Exit(1)


def _sample_links(settings: Settings, detail: dict | None) -> dict[str, str | None]:
    """The sample task's proxy MP4 and HLS playlist as gateway media links (the HLS one plays)."""
    from delivery.links import LinkSigner

    signer = LinkSigner.from_settings(settings)
    keys = {a["kind"]: a["key"] for a in detail["assets"]} if detail else {}
    return {f"sample_{name}_url": signer.link(keys[kind], settings.media_link_ttl_s).url if kind in keys else None
            for kind, name in (("PROXY", "proxy"), ("HLS", "hls"))}


def _print_demo(r: dict) -> None:
    console.print(f"import {r['import_id']}: {r['tasks']} tasks, {r['seconds']} s, "
                  f"{r['status_calls_per_task']} provider status calls per task")
    table = Table("status", "tasks")
    for status_name, n in sorted(r["by_status"].items()):
        table.add_row(status_name, str(n))
    console.print(table)
    if r["ledger_ok"]:
        console.print(f"ledger check: ok (every task's reservation settled or released; reelqueue ledger check "
                      f"{r['import_id']})")
    else:
        console.print(f"[bold red]ledger check: {len(r['ledger_violations'])} violations[/] "
                      f"(reelqueue ledger check {r['import_id']})")
    console.print("Temporal Web UI, this import's workflows:", style="bold")
    console.print(r["temporal_ui"], soft_wrap=True)
    if r["sample_task"]:
        console.print(f"A finished task, with attempts, events and assets: reelqueue show {r['sample_task']}")
        console.print("Its proxy MP4 and its HLS stream (links valid 24 h, through the gateway):", style="bold")
        console.print(r["sample_proxy_url"], soft_wrap=True)
        console.print(r["sample_hls_url"], soft_wrap=True)
        console.print(f"Every finished video with its links: reelqueue export {r['import_id']} --format csv; "
                      f"the MP4s: reelqueue export {r['import_id']} --download DIR")
    console.print("The stack keeps running for inspection. Stop it with: [bold]reelqueue dev down[/] (or make down).")
