"""The delivery commands: `export` (rows, or the MP4s with a manifest) and `gc` (storage clean-up).

Argument parsing and printing only; the rows are delivery/export.py, the copy delivery/download.py,
the clean-up control/storage_gc.py.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from enum import StrEnum
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from cli.output import EXIT_BAD_INPUT, EXIT_FAILURE, console, emit_json, err_console, fail
from config.settings import get_settings
from schema import queries
from schema.db import Database


class ExportFormat(StrEnum):
    csv = "csv"
    json = "json"


def export(
    import_id: str = typer.Argument(..., help="the import whose finished videos to list"),
    fmt: ExportFormat = typer.Option(ExportFormat.csv, "--format", help="csv or json"),
    out: Path | None = typer.Option(None, "--out", help="write the rows to FILE (default: stdout)"),
    download: Path | None = typer.Option(None, "--download", help="copy the MP4s and a manifest.json into DIR"),
    link_hours: float | None = typer.Option(None, "--link-hours", help="validity of the links (default: settings)"),
    as_json: bool = typer.Option(False, "--json", help="with --download: print the summary as JSON"),
) -> None:
    """One row per finished video (SUCCEEDED) of an import, or with --download the videos themselves."""
    from adapters.storage import ObjectStorage
    from cli.starting import progress_bars  # here: it loads the workflows, which other commands need not
    from delivery.download import download as copy_videos
    from delivery.export import export_rows, write_csv, write_json
    from delivery.links import LinkSigner

    settings = get_settings()
    ttl_s = link_hours * 3600 if link_hours is not None else settings.media_link_ttl_s
    if not 0 < ttl_s <= 7 * 24 * 3600:
        fail("--link-hours must be above 0 and at most 168", EXIT_BAD_INPUT, as_json=as_json)
    db = Database(settings.database_url)
    with db.transaction() as session:
        if not queries.import_exists(session, import_id):
            fail(f"no import {import_id}", EXIT_BAD_INPUT, as_json=as_json)
        total = queries.status_counts(session, import_id).get("SUCCEEDED", 0)
    rows = export_rows(db, LinkSigner.from_settings(settings), import_id, ttl_s)
    if download is not None:
        if download.exists() and not download.is_dir():
            fail(f"--download: {download} is not a directory", EXIT_BAD_INPUT, as_json=as_json)
        with progress_bars(not as_json) as progress:
            bar = progress.add_task("copying", total=total)
            summary = copy_videos(ObjectStorage.from_settings(settings), import_id, rows, download,
                                  progress=lambda _row: progress.advance(bar))
        if as_json:
            emit_json(summary.model_dump(mode="json"))
        else:
            console.print(f"{summary.videos} videos in {summary.directory}: {summary.copied} copied "
                          f"({summary.resumed} resumed, {summary.bytes_copied} bytes), {summary.present} already "
                          f"there; manifest {summary.manifest}")
        if summary.failed:
            for name in summary.failed:
                why = summary.errors.get(name, "sha256 mismatch, not kept")
                err_console.print(f"[bold red]not copied:[/] {escape(name)}: {escape(why)}", soft_wrap=True)
            raise typer.Exit(EXIT_FAILURE)
        return
    writer = write_csv if fmt is ExportFormat.csv else (lambda r, o: write_json(r, o, import_id))
    if out is None:
        writer(rows, sys.stdout)
        return
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "w", encoding="utf-8", newline="") as handle:
        n = writer(rows, handle)
    tmp.replace(out)
    err_console.print(f"{n} rows written to {out}")


def gc(
    dry_run: bool = typer.Option(False, "--dry-run", help="report what would be removed; remove nothing"),
    min_age_hours: float | None = typer.Option(
        None, "--min-age-hours", help="remove staging objects older than this (default: settings, 24)"),
    prefix: str = typer.Option("tenants/", "--prefix", help="only objects under this key prefix"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Remove staging objects older than the safety window; report objects no row refers to."""
    from adapters.storage import ObjectStorage
    from cli.starting import progress_bars
    from control.storage_gc import collect_garbage

    settings = get_settings()
    min_age_s = min_age_hours * 3600 if min_age_hours is not None else settings.gc_staging_min_age_s
    if min_age_s < 0:
        fail("--min-age-hours must not be negative", EXIT_BAD_INPUT, as_json=as_json)
    if not prefix.startswith("tenants/"):
        fail("--prefix must start with tenants/", EXIT_BAD_INPUT, as_json=as_json)
    with progress_bars(not as_json) as progress:
        bar = progress.add_task("objects scanned", total=None)
        report = collect_garbage(Database(settings.database_url), ObjectStorage.from_settings(settings),
                                 prefix=prefix, min_age=timedelta(seconds=min_age_s), dry_run=dry_run,
                                 progress=lambda n: progress.advance(bar, n))
    if as_json:
        emit_json(report.model_dump(mode="json"))
        return
    verb = "would remove" if dry_run else "removed"
    table = Table("", "objects", "bytes", title=f"gc {prefix}{' (dry run)' if dry_run else ''}")
    table.add_row("scanned", str(report.scanned), "")
    table.add_row("referenced by a row (kept)", str(report.referenced), "")
    table.add_row(f"staging, older than {min_age_s / 3600:g} h ({verb})", str(report.staging_removed),
                  str(report.staging_removed_bytes))
    table.add_row("staging, younger (kept)", str(report.staging_young), "")
    table.add_row("no row refers to them (kept, listed below)", str(report.unreferenced),
                  str(report.unreferenced_bytes))
    console.print(table)
    for obj in report.unreferenced_objects:
        console.print(f"  unreferenced: {obj.key} ({obj.size} bytes)", soft_wrap=True)
