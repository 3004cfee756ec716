"""The task commands: import, run, status, tasks, show, cancel."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from cli.output import EXIT_BAD_INPUT, EXIT_TIMEOUT, console, emit_json, fail, said
from config.settings import Settings, get_settings
from contracts.admission import BreakerMode, GateSnapshot
from schema import queries
from schema.db import Database

if TYPE_CHECKING:
    from control.gates import GateReading

PRESIGN_TTL = timedelta(hours=12)
TASK_MEDIA = {"RAW_OUTPUT", "PROXY", "HLS", "THUMBNAIL"}  # under the task's own key folder


def _db(settings: Settings) -> Database:
    return Database(settings.database_url)


def import_catalog(
    file: Path = typer.Argument(..., help="catalog export: plain CSV, Shopify, WooCommerce or Merchant Center"),
    plan: Path = typer.Option(..., "--plan", help="production plan (TOML)"),
    catalog: str | None = typer.Option(None, "--catalog", help="catalog name (default: plan's, else file name)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="validate and report; write nothing"),
    supersedes: str | None = typer.Option(None, "--supersedes", help="id of the rejected import this corrects"),
    check_urls: bool = typer.Option(True, "--check-urls/--no-check-urls", help="fetch and hash image URLs"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Import a catalog as an immutable, versioned import and expand it into tasks."""
    from adapters.providers import build_providers
    from catalog.importer import ImportRejected
    from catalog.plan import PlanError, check_routes, load_plan
    from catalog.readers import CatalogFormatError
    from catalog.service import UnknownImport, run_import
    from cli.starting import progress_bars

    settings = get_settings()
    if not file.is_file():
        fail(f"catalog file not found: {file}", EXIT_BAD_INPUT, as_json=as_json)
    try:
        with progress_bars(not as_json and check_urls, transient=True) as progress:
            bar = progress.add_task("checking images", total=None)
            parsed = load_plan(plan)
            check_routes(parsed, build_providers(settings), f"plan {plan}")
            summary = run_import(settings, file, parsed, catalog=catalog, dry_run=dry_run,
                                 supersedes=supersedes, check_urls=check_urls,
                                 on_image=lambda: progress.advance(bar))
    except PlanError as exc:
        fail(str(exc), EXIT_BAD_INPUT, as_json=as_json)
    except CatalogFormatError as exc:
        fail(str(exc), EXIT_BAD_INPUT, as_json=as_json, headers_found=exc.headers_found,
             missing_fields=exc.missing_fields)
    except UnknownImport as exc:
        fail(str(exc), EXIT_BAD_INPUT, as_json=as_json)
    except ImportRejected as exc:
        _print_import(exc.summary, as_json)
        raise typer.Exit(EXIT_BAD_INPUT) from exc
    _print_import(summary, as_json)
    if summary.status == "REJECTED":
        raise typer.Exit(EXIT_BAD_INPUT)


SHOWN_ISSUES = 12


def _print_import(summary, as_json: bool) -> None:  # noqa: ANN001 - ImportSummary
    if as_json:
        emit_json(summary.model_dump(mode="json"))
        return
    table = Table(title=f"import {summary.import_id or '(dry run)'}  [{summary.status}]", show_header=False)
    for key in ("catalog", "format", "version", "rows", "products", "invalid_rows", "tasks", "tasks_new",
                "tasks_reused", "previous_import", "supersedes"):
        value = getattr(summary, key)
        if value is not None:
            table.add_row(key, said(value))
    for action, n in sorted(summary.issues_by_action.items()):
        table.add_row(f"issues: {action}", str(n))
    if summary.already_imported:
        table.add_row("note", "this file was imported before with this plan: nothing new was created")
    console.print(table)
    _print_issues(summary.report)
    console.print(f"report: {summary.report}", soft_wrap=True)
    console.print(f"        {summary.report_csv}", soft_wrap=True)


def _print_issues(report_path: str | None) -> None:
    """The first issues of the report, so the terminal shows what the report is about."""
    import json

    if not report_path or not Path(report_path).is_file():
        return
    issues = json.loads(Path(report_path).read_text(encoding="utf-8"))["issues"]
    if not issues:
        return
    table = Table("row", "product", "field", "value", "reason", "action",
                  title=f"validation issues ({len(issues)})", show_lines=False)
    for issue in issues[:SHOWN_ISSUES]:
        table.add_row(str(issue["row"] or "-"), said(issue["product_id"] or "-"), said(issue["field"]),
                      said((issue["value"] or "")[:40]), said(issue["reason"][:90]), issue["action"])
    console.print(table)
    if len(issues) > SHOWN_ISSUES:
        console.print(f"... and {len(issues) - SHOWN_ISSUES} more in the report")


def run(
    import_id: str = typer.Argument(..., help="import id printed by `reelqueue import`"),
    wait: bool = typer.Option(False, "--wait", help="wait until every task is terminal, with progress"),
    timeout: float = typer.Option(3600, "--timeout", help="seconds to wait with --wait"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Start one durable workflow per task of an import (already started tasks are left alone)."""
    from cli.starting import start_import_tasks

    settings = get_settings()
    db = _db(settings)
    with db.transaction() as session:
        if not queries.import_exists(session, import_id):
            fail(f"no import {import_id}", EXIT_BAD_INPUT, as_json=as_json)
        total = queries.count_tasks(session, import_id)
    started = start_import_tasks(settings, db, import_id, total, show=not as_json)
    result: dict = {"import_id": import_id, "tasks": total, **started}
    if wait:
        from cli.starting import SETTLED_FOR_NOW

        counts = wait_for_import(db, import_id, total, show=not as_json, timeout_s=timeout)
        result["by_status"] = counts
        result["timed_out"] = sum(counts.get(s.value, 0) for s in SETTLED_FOR_NOW) < total
    if as_json:
        emit_json(result)
    else:
        console.print(f"started {started['started']} workflows "
                      f"({started['already_started']} already running, {started['already_finished']} finished)")
    if wait:
        waiting = {s: n for s, n in result["by_status"].items() if s in ("NEEDS_ATTENTION", "REVIEW") and n}
        if waiting and not as_json:
            where = [cmd for status, cmd in (("NEEDS_ATTENTION", "reelqueue attention"),
                                             ("REVIEW", f"reelqueue review {import_id}")) if status in waiting]
            console.print(f"waiting for a person: {waiting} ({'; '.join(where)})")
        if result["timed_out"]:
            if not as_json:
                console.print(f"[bold yellow]timed out[/] after {timeout:g} s with tasks still running; they go on "
                              f"(follow with reelqueue status {import_id})")
            raise typer.Exit(EXIT_TIMEOUT)
        if result["by_status"].get("SUCCEEDED", 0) != total:
            raise typer.Exit(1)


def wait_for_import(db: Database, import_id: str, total: int, *, show: bool, timeout_s: float) -> dict[str, int]:
    from cli.starting import wait_with_progress

    def read() -> dict[str, int]:
        with db.transaction() as session:
            return queries.status_counts(session, import_id)

    return wait_with_progress(read, total, show=show, timeout_s=timeout_s)


def status(
    import_id: str | None = typer.Argument(None, help="limit to one import"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Task counts by status (from Postgres, the source of truth), each provider's admission gate,
    and the webhook events no task claimed (all imports: an orphan's task is not known)."""
    from control.gates import gate_snapshots
    from schema.poll_budget import booked_ahead
    from schema.webhook_inbox import orphan_counts

    settings = get_settings()
    budgets = {p: limits.polls_per_second for p, limits in settings.provider_limits.items() if limits.polls_per_second}
    with _db(settings).transaction() as session:
        counts = queries.status_counts(session, import_id)
        providers = queries.providers_in_use(session, import_id)
        layer_gates = queries.layer_gates_in_use(session, import_id, settings.admission_layers())
        webhooks = orphan_counts(session, settings.webhook_orphan_ttl_s)
        ahead = booked_ahead(session, sorted(budgets))
    readings = asyncio.run(gate_snapshots(settings, providers + [g for names in layer_gates.values() for g in names]))
    gates = {p: readings[p] for p in providers}
    total = sum(counts.values())
    polling = {p: {"polls_per_second": rate, "booked_ahead_s": round(ahead.get(p, 0.0), 3)}
               for p, rate in sorted(budgets.items())}
    if as_json:
        emit_json({"total": total, "by_status": counts,
                   "providers": {p: g.as_json() if g else None for p, g in gates.items()},
                   "layers": {layer: {g: readings[g].as_json() if readings[g] else None for g in names}
                              for layer, names in layer_gates.items()},
                   "poll_budgets": polling, "webhooks": webhooks.model_dump()})
        return
    table = Table("status", "tasks", title=f"tasks{' of ' + import_id if import_id else ''}: {total}")
    for s, n in sorted(counts.items()):
        table.add_row(s, str(n))
    console.print(table)
    admission = Table("provider", "slots in use / limit", "effective limit", "waiting", "oldest wait",
                      "refusals", "breaker", title="admission")
    for provider, reading in gates.items():
        gate = reading.snapshot if reading else None
        if gate is None:
            unknown = "?" if reading else "-"  # stale: the gate runs but did not answer
            admission.add_row(provider, unknown, unknown, unknown if reading else "0", unknown, unknown, unknown)
        else:
            admission.add_row(provider, f"{gate.in_use} / {gate.limit}", str(gate.effective), str(gate.waiting),
                              f"{gate.oldest_wait_s:.0f} s", str(gate.throttles), _breaker_text(gate))
    console.print(admission)
    _print_layers(layer_gates, readings)
    for provider, budget in polling.items():
        console.print(f"{provider}: status calls at most {budget['polls_per_second']:g}/s (all workers), "
                      f"booked {budget['booked_ahead_s']:.1f} s ahead")
    for provider, reading in gates.items():
        if reading and reading.stale:
            console.print(f"[yellow]{provider}: gate figures unknown[/]: {reading.reason}", soft_wrap=True)
    console.print(f"webhook events not matched to a task: {webhooks.orphans} orphans, "
                  f"{webhooks.expired} expired (older than {settings.webhook_orphan_ttl_s:.0f} s)")


def _print_layers(layer_gates: dict[str, list[str]], readings: dict[str, GateReading | None]) -> None:
    """The platform's, tenants' and models' gates: slots in use of the limit, waiting, the oldest wait."""
    names = [g for gates in layer_gates.values() for g in gates]
    if not names:
        return
    table = Table("gate", "slots in use / limit", "waiting", "oldest wait", title="admission layers")
    for name in names:
        gate = readings[name].snapshot if readings[name] else None
        if gate is None:
            unknown = "?" if readings[name] else "-"
            table.add_row(name, unknown, unknown if readings[name] else "0", unknown)
        else:
            table.add_row(name, f"{gate.in_use} / {gate.limit}", str(gate.waiting), f"{gate.oldest_wait_s:.0f} s")
    console.print(table)


def _breaker_text(gate: GateSnapshot) -> str:
    """The provider breaker in one cell: open (until when), half-open (probing) or closed (recent failures)."""
    if gate.breaker is BreakerMode.OPEN:
        return f"[red]open[/] until {gate.breaker_open_until:%H:%M:%S} UTC (opened {gate.breaker_opens}x)"
    if gate.breaker is BreakerMode.HALF_OPEN:
        return "[yellow]half-open[/]: one probe submit"
    return f"closed, {gate.breaker_failures} recent submit failures" if gate.breaker_failures else "closed"


def tasks(
    import_id: str | None = typer.Argument(None, help="limit to one import"),
    status_filter: str | None = typer.Option(None, "--status", help="only tasks in this status"),
    limit: int = typer.Option(0, "--limit", help="at most this many (0: all)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """List tasks with their status."""
    with _db(get_settings()).transaction() as session:
        rows = [queries.task_summary(t) for t in
                queries.list_tasks(session, import_id, status_filter, limit or None)]
    if as_json:
        emit_json({"tasks": rows})
        return
    table = Table("id", "status", "product", "template", "locale", "ratio", "variant")
    for r in rows:
        table.add_row(r["id"], r["status"], said(r["product_id"]), said(r["template"]), said(r["locale"]),
                      r["aspect_ratio"], said(r["variant"]))
    console.print(table)


def show(
    task_id: str = typer.Argument(...),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """One task: its facts, every attempt, every state event, its assets (with openable URLs)."""
    from adapters.storage import ObjectStorage
    from delivery.links import LinkSigner

    settings = get_settings()
    with _db(settings).transaction() as session:
        detail = queries.task_detail(session, task_id)
    if detail is None:
        fail(f"no task {task_id}", EXIT_BAD_INPUT, as_json=as_json)
    detail["live"] = _live(settings, detail["task"])
    storage = ObjectStorage.from_settings(settings)
    signer = LinkSigner.from_settings(settings)
    for asset in detail["assets"]:  # the task's videos through the gateway (HLS plays), images presigned
        if asset["kind"] in TASK_MEDIA:
            asset["url"] = signer.link(asset["key"], PRESIGN_TTL.total_seconds()).url
        else:
            asset["url"] = storage.presigned_url(asset["key"], PRESIGN_TTL)
    if as_json:
        emit_json(detail)
        return
    t = detail["task"]
    console.print(f"[bold]{t['id']}[/]  {t['status']}  {said(t['product_id'])} / {said(t['template'])} / "
                  f"{said(t['locale'])} / {t['aspect_ratio']} / {said(t['variant'])}  (workflow {t['workflow_id']})")
    if t["last_error"]:
        console.print(f"last error: {said(t['last_error_class'])}: {said(t['last_error'])}")
    live = detail["live"]
    if live is not None:
        console.print(f"now: {said(live['text'])}", soft_wrap=True)
        if live["position"] is not None:
            console.print(f"place in line at {t['provider']}: {live['position']} (1 = admitted next)")
    elif t["status"] == "RETRY_WAIT" and t["next_retry_at"]:
        console.print(f"waiting: next attempt due at {t['next_retry_at']}")
    elif t["status"] == "QUEUED":
        console.print(f"waiting: for a {t['provider']} slot (its gate admits tasks oldest first)")
    attempts = Table("no", "route", "state", "job", "provider status", "polls", "error", title="attempts")
    for a in detail["attempts"]:
        note = f"\n[dim]{said(a['route_note'])}[/]" if a["route_note"] else ""
        route = said(f"{a['provider']}/{a['model']}") + note
        attempts.add_row(str(a["attempt_no"]), route, a["submit_state"], said(a["provider_job_id"] or "-"),
                         said(a["provider_status"] or "-"), str(a["poll_count"]), said(a["error"] or ""))
    console.print(attempts)
    events = Table("v", "event", "from", "to", "applied", "at", title="state events")
    for e in detail["events"]:
        events.add_row(str(e["version"]), e["event"], e["from"], e["to"], str(e["applied"]), e["at"])
    console.print(events)
    assets = Table("kind", "key", "size", "sha256", title="assets")
    for a in detail["assets"]:
        assets.add_row(a["kind"], a["key"], str(a["size"]), a["sha256"][:16])
    console.print(assets)
    if detail["review_checks"]:
        checks = Table("attempt", "check", "passed", "measured", title="automatic checks (review)")
        for c in detail["review_checks"]:
            for one in c["checks"]:
                checks.add_row(str(c["attempt_no"]), one["name"], str(one["passed"]), said(one["detail"]))
        console.print(checks)


def _live(settings: Settings, task: dict) -> dict | None:
    """A running task's live details from its workflow (with its place in line), else None."""
    from control.gates import live_details
    from schema.state_machine import TERMINAL

    if task["status"] in TERMINAL:
        return None
    live = asyncio.run(live_details(settings, task["workflow_id"], task["provider"]))
    return live.model_dump(mode="json") if live else None


def cancel(
    task_id: str | None = typer.Argument(None, help="the task to stop (or --import)"),
    import_id: str | None = typer.Option(None, "--import", help="every open task of this import"),
    status_filter: str | None = typer.Option(None, "--status", help="with --import: only tasks in these "
                                             "statuses (comma-separated)"),
    reason: str = typer.Option("requested by user", "--reason"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Ask a task (or every open task of an import) to stop: its workflow is cancelled (an intent: a
    job that already succeeded wins)."""
    from adapters.temporal_client import connect
    from control.cancel import cancel_task

    if (task_id is None) == (import_id is None):
        fail("give a TASK_ID or --import IMPORT_ID", EXIT_BAD_INPUT, as_json=as_json)
    settings = get_settings()
    db = _db(settings)
    if import_id is not None:
        _cancel_import(settings, db, import_id, status_filter, reason, as_json=as_json)
        return
    with db.transaction() as session:
        detail = queries.task_detail(session, task_id)
    if detail is None:
        fail(f"no task {task_id}", EXIT_BAD_INPUT, as_json=as_json)

    async def go() -> str:
        return await cancel_task(await connect(settings), db, task_id, detail["task"]["workflow_id"], reason, by="cli")

    outcome = asyncio.run(go())
    if as_json:
        emit_json({"task_id": task_id, "outcome": outcome})
    else:
        console.print(f"{task_id}: {outcome}")


def _cancel_import(settings: Settings, db: Database, import_id: str, status_filter: str | None, reason: str, *,
                   as_json: bool) -> None:
    """`cancel --import`: each open task the way `cancel TASK_ID` does one, a few at a time, with a progress bar."""
    from adapters.temporal_client import connect
    from cli.starting import progress_bars
    from contracts.task import TaskStatus
    from control.imports import cancel_import_tasks, open_tasks

    statuses = [s.strip().upper() for s in (status_filter or "").split(",") if s.strip()]
    unknown = [s for s in statuses if s not in TaskStatus.__members__]
    if unknown:
        fail(f"unknown status: {', '.join(unknown)}", EXIT_BAD_INPUT, as_json=as_json)
    with db.transaction() as session:
        if not queries.import_exists(session, import_id):
            fail(f"no import {import_id}", EXIT_BAD_INPUT, as_json=as_json)
    total = sum(1 for _ in open_tasks(db, import_id, statuses))

    async def go() -> dict[str, int]:
        client = await connect(settings)
        with progress_bars(not as_json) as progress:
            bar = progress.add_task("cancelling", total=total)
            return await cancel_import_tasks(client, db, import_id, reason, by="cli", statuses=statuses,
                                             on_done=lambda: progress.advance(bar))

    counts = asyncio.run(go())
    if as_json:
        emit_json({"import_id": import_id, "tasks": total, **counts})
    else:
        console.print(f"import {import_id}: {counts['cancel_requested']} cancels requested, {counts['canceled']} "
                      f"canceled before starting, {counts['unchanged']} unchanged")


def retry(
    import_id: str = typer.Argument(..., help="the import whose ended tasks to run again"),
    status_filter: str = typer.Option("FAILED_FINAL,EXPIRED", "--status",
                                      help="comma-separated: FAILED_FINAL, EXPIRED, CANCELED, INVALID (those "
                                           "whose cause can change: a provider key, an image fetch)"),
    task_id: str | None = typer.Option(None, "--task", help="only this task"),
    with_video: bool = typer.Option(False, "--with-video",
                                    help="also tasks that ended with a paid video (expired or cancelled in "
                                         "REVIEW): rendered and paid for again"),
    reason: str = typer.Option("re-run by an operator", "--reason"),
    by: str | None = typer.Option(None, "--by", help="who decided (default: your user name)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="list what would be re-run; change nothing"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Re-drive tasks that ended without a video: a new run each (new reservation, attempts continue);
    INVALID tasks whose cause can change are validated again."""
    import getpass

    from control.redrive import RedriveRefused, redrive

    statuses = [s.strip().upper() for s in status_filter.split(",") if s.strip()]
    try:
        plan = asyncio.run(redrive(get_settings(), import_id, statuses, task_id=task_id, with_video=with_video,
                                   dry_run=dry_run, by=by or getpass.getuser(), reason=reason))
    except RedriveRefused as exc:
        fail(str(exc), EXIT_BAD_INPUT, as_json=as_json)
    if as_json:
        emit_json(plan.model_dump(mode="json"))
        return
    table = Table("id", "status", "product", "template", "locale", "ratio", "next run",
                  title=f"{'would re-run' if dry_run else 're-run'}: {len(plan.tasks)} tasks of {import_id}")
    for t in plan.tasks:
        table.add_row(t["id"], t["status"], said(t["product_id"]), said(t["template"]), said(t["locale"]),
                      t["aspect_ratio"], str(t["next_run"]))
    console.print(table)
    if not dry_run:
        console.print(f"{plan.redriven} tasks re-driven, {plan.started} workflows started; follow with "
                      f"reelqueue status {import_id}")
