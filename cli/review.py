"""`reelqueue review IMPORT_ID`: the reviewer's link, and decisions for scripts; `reelqueue overview
IMPORT_ID`: a link to the import's overview page (progress, spend, failures, videos), which opens
nothing else.

Without an action it prints a gallery link with a signed, expiring reviewer token (it opens
nothing). `--list` shows what waits in REVIEW with its automatic checks; `--approve TASK ...` and
`--reject TASK --reason TEXT` send the `review` update to each task's workflow (control/review.py).
"""

from __future__ import annotations

import asyncio

import typer
from rich.table import Table

from cli.operations import user_name
from cli.output import EXIT_BAD_INPUT, EXIT_FAILURE, console, emit_json, fail, said
from config.settings import get_settings
from schema.db import Database


def review(
    import_id: str = typer.Argument(..., help="the import whose videos to review"),
    more: list[str] = typer.Argument(None, help="more task ids for --approve / --reject (--approve T1 T2 ...)"),
    approve: list[str] = typer.Option([], "--approve", help="approve this task (repeat for several)"),
    reject: list[str] = typer.Option([], "--reject", help="reject this task (needs --reason)"),
    reason: str = typer.Option("", "--reason", help="why the videos are rejected; kept with the decision"),
    list_: bool = typer.Option(False, "--list", help="list the tasks waiting in REVIEW with their checks"),
    by: str | None = typer.Option(None, "--by", help="reviewer name (default: your user name)"),
    hours: float | None = typer.Option(None, "--hours", help="how long the link works (default from settings)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Print a gallery link for IMPORT_ID, or list / approve / reject its videos in REVIEW."""
    from schema import queries

    settings = get_settings()
    if sum(bool(x) for x in (approve, reject, list_)) > 1:
        fail("choose one of --approve, --reject, --list", EXIT_BAD_INPUT, as_json=as_json)
    if more and not (approve or reject):
        fail(f"task ids {' '.join(more)} given without --approve or --reject", EXIT_BAD_INPUT, as_json=as_json)
    more = more or []
    approve, reject = (approve + more, reject) if approve else (approve, reject + more)
    if reject and not reason.strip():
        fail("--reject needs --reason", EXIT_BAD_INPUT, as_json=as_json)
    if hours is not None and hours <= 0:
        fail("--hours must be above 0", EXIT_BAD_INPUT, as_json=as_json)
    db = Database(settings.database_url)
    with db.transaction() as session:
        if not queries.import_exists(session, import_id):
            fail(f"no import {import_id}", EXIT_BAD_INPUT, as_json=as_json)
    reviewer = by or user_name()
    if list_:
        _list(db, import_id, as_json)
    elif approve or reject:
        _decide(db, settings, import_id, approve or reject, "approve" if approve else "reject", reason, reviewer,
                as_json)
    else:
        _link(settings, import_id, reviewer, hours or settings.review_token_hours, as_json)


def overview(
    import_id: str = typer.Argument(..., help="the import to follow"),
    by: str | None = typer.Option(None, "--by", help="viewer name shown on the page (default: your user name)"),
    hours: float | None = typer.Option(None, "--hours", help="how long the link works (default from settings)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Print a link to IMPORT_ID's overview page: progress over time, spend and waste, failures by
    reason, finished videos, each task's workflow in the Temporal Web UI."""
    from control.review_tokens import OVERVIEW
    from schema import queries

    settings = get_settings()
    if hours is not None and hours <= 0:
        fail("--hours must be above 0", EXIT_BAD_INPUT, as_json=as_json)
    with Database(settings.database_url).transaction() as session:
        if not queries.import_exists(session, import_id):
            fail(f"no import {import_id}", EXIT_BAD_INPUT, as_json=as_json)
    _link(settings, import_id, by or user_name(), hours or settings.review_token_hours, as_json, scope=OVERVIEW)


def _link(settings, import_id: str, reviewer: str, hours: float, as_json: bool,  # noqa: ANN001
          *, scope: str = "review") -> None:
    """A signed link to the import's gallery (scope `review`) or overview page (scope `overview`)."""
    from control import review_tokens

    if not settings.review_secret:
        fail("no review secret: start the stack (reelqueue dev up) or set REELQUEUE_REVIEW_SECRET", EXIT_FAILURE,
             as_json=as_json)
    token = review_tokens.issue(settings.review_secret, import_id, reviewer, ttl_s=hours * 3600, scope=scope)
    base = (settings.public_url or settings.gateway_url).rstrip("/")
    page = "" if scope == review_tokens.REVIEW else f"/{scope}"
    url = f"{base}/review/{import_id}{page}?token={token}"
    if as_json:
        emit_json({"import_id": import_id, "reviewer": reviewer, "expires_in_hours": hours, "url": url})
    else:
        console.print(f"{scope} link for {reviewer}, valid {hours:g} h:\n{url}", soft_wrap=True)


def _list(db: Database, import_id: str, as_json: bool) -> None:
    from control.review import review_items, status_counts

    with db.transaction() as session:
        items = review_items(session, import_id)
        left = status_counts(session, import_id).get("REVIEW", 0)
    if as_json:
        emit_json({"import_id": import_id, "waiting": left, "tasks": [i.model_dump(mode="json") for i in items]})
        return
    table = Table("task", "product", "locale", "ratio", "template", "checks", "cost", "attempts")
    for i in items:
        failed = [c.name for c in i.checks if not c.passed]
        checks = "not run" if i.checks_passed is None else ("ok" if not failed else "failed: " + ", ".join(failed))
        table.add_row(i.task_id, said(i.title), said(i.locale), i.aspect_ratio, said(i.template_id), checks,
                      f"{i.cost:g}", str(i.attempts))
    console.print(table)
    console.print(f"{left} waiting for review")


def _decide(db: Database, settings, import_id: str, task_ids: list[str], action: str, reason: str,  # noqa: ANN001
            reviewer: str, as_json: bool) -> None:
    from adapters.temporal_client import connect
    from contracts.messages import ReviewAction, ReviewRequest
    from control.review import decide, tasks_of_import

    with db.transaction() as session:
        stray = sorted(set(task_ids) - tasks_of_import(session, import_id, task_ids))
    if stray:
        fail(f"not tasks of import {import_id}: {', '.join(stray)}", EXIT_BAD_INPUT, as_json=as_json)
    request = ReviewRequest(action=ReviewAction(action), by=reviewer, reason=reason.strip())

    async def send():  # noqa: ANN202
        client = await connect(settings)
        return await decide(db, client, list(dict.fromkeys(task_ids)), request)

    outcomes = asyncio.run(send())
    if as_json:
        emit_json({"import_id": import_id, "action": action, "by": reviewer,
                   "results": [o.model_dump() for o in outcomes]})
    else:
        for o in outcomes:
            console.print(f"{o.task_id}: {o.message}" + (f"; task is now {o.status}" if o.ok else ""), soft_wrap=True)
    if not all(o.ok for o in outcomes):
        raise typer.Exit(EXIT_BAD_INPUT)
