"""The operator commands: `ledger check`, `attention`, `resolve` and `renditions`.

Argument parsing and printing only; the checks live in schema/ledger_check.py and
control/ledger_audit.py, the attention queue in schema/attention.py, the decision in control/resolve.py,
renditions in control/renditions.py.
"""

from __future__ import annotations

import asyncio
import getpass

import typer
from rich.table import Table

from cli.output import EXIT_BAD_INPUT, EXIT_FAILURE, console, emit_json, fail, said
from config.settings import get_settings
from contracts.messages import ResolveAction, ResolveRequest
from schema.db import Database

ledger_app = typer.Typer(help="Check the credit ledger against the tasks, attempts and workflows.",
                         no_args_is_help=True)


@ledger_app.command("check")
def ledger_check(
    import_id: str | None = typer.Argument(None, help="limit to the tasks of one import"),
    as_json: bool = typer.Option(False, "--json"),
    skip_storage: bool = typer.Option(False, "--skip-storage",
                                      help="do not read object storage (asset hashes, orphan objects)"),
) -> None:
    """Verify every task's ledger and the other invariants (docs/reliability.md); list the violations
    (exit 1 if there is any)."""
    from control.invariants import check_invariants
    from schema import queries

    settings = get_settings()
    if import_id is not None:
        with Database(settings.database_url).transaction() as session:
            if not queries.import_exists(session, import_id):
                fail(f"no import {import_id}", EXIT_BAD_INPUT, as_json=as_json)
    report = asyncio.run(check_invariants(settings, import_id=import_id, require_finished=False,
                                          storage=not skip_storage))
    if as_json:  # the ledger's rows as before, and every rule's result
        emit_json({"import_id": import_id, "tasks_checked": report.tasks,
                   "workflows_described": report.workflows_described,
                   "violations": [v.model_dump(mode="json") for v in report.ledger_violations],
                   **report.model_dump(mode="json", exclude={"ledger_violations", "workflows_described"})})
    else:
        _print_invariants(report, import_id)
    if not report.ok:
        raise typer.Exit(EXIT_FAILURE)


@ledger_app.command("reconcile")
def ledger_reconcile(
    provider: str | None = typer.Option(None, "--provider", help="only this provider (default: every one)"),
    since_h: float | None = typer.Option(None, "--since", help="hours back to list jobs from (default 24)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """The provider backstop: list the jobs each provider ran in the window and book what the ledger
    does not account for (orphans, strays, cost differences); exit 1 if a provider could not be asked."""
    from adapters.providers import build_providers
    from control.provider_backstop import reconcile, window_start

    if since_h is not None and not 0 < since_h <= MAX_WINDOW_H:
        fail(f"--since: hours between 0 and {MAX_WINDOW_H}, not {since_h:g}", EXIT_BAD_INPUT, as_json=as_json)
    settings = get_settings()
    providers = build_providers(settings)
    if provider is not None and provider not in providers:
        fail(f"--provider: no provider {provider!r} (known: {', '.join(sorted(providers))})", EXIT_BAD_INPUT,
             as_json=as_json)
    report = reconcile(Database(settings.database_url), providers, since=window_start(since_h), only=provider)
    failed = [s for s in report.skipped if s.reason.startswith("listing failed")]
    if as_json:
        emit_json(report.model_dump(mode="json"))
    else:
        _print_backstop(report)
    if failed:
        raise typer.Exit(EXIT_FAILURE)


MAX_WINDOW_H = 24 * 30  # a month of jobs: longer windows are paged for too long


def _print_backstop(report) -> None:  # noqa: ANN001 - control.provider_backstop.BackstopReport
    if report.findings:
        table = Table("provider", "job", "status", "cost", "verdict", "task", "attempt", "booked", "detail",
                      title="provider jobs the ledger did not account for as the provider says")
        table.columns[8].overflow = "fold"
        for f in report.findings:
            table.add_row(f.provider, f.job_id, f.provider_status, "-" if f.cost is None else f"{f.cost:g}",
                          f.verdict.value, f.task_id or "none", str(f.attempt_no or "-"),
                          "-" if f.booked is None else f"{f.booked:g}", f.detail)
        console.print(table)
    for s in report.skipped:
        console.print(f"[yellow]{s.provider}[/]: not checked: {s.reason}", soft_wrap=True)
    console.print(f"{report.listed} jobs listed since {report.since.isoformat(timespec='seconds')}: "
                  f"{report.known} as the ledger has them, {len(report.findings)} found")


def _print_invariants(report, import_id: str | None) -> None:  # noqa: ANN001 - schema.invariants.InvariantReport
    from schema.invariants import LEDGER_RULES
    from schema.ledger_check import fmt_amount

    rules = Table("rule", "violations", "detail", title="invariants")
    rules.columns[2].overflow = "fold"
    for r in report.rules:
        rules.add_row(r.rule, str(r.violations) if r.checked else "-", r.detail)
    console.print(rules)
    if report.ledger_violations:
        table = Table("task", "status", "rule", "detail", title="ledger violations")
        table.columns[0].no_wrap = True  # ids are copied into `reelqueue show`
        table.columns[3].overflow = "fold"
        for v in report.ledger_violations:
            table.add_row(v.task_id, v.status, v.rule.value, v.detail)
        console.print(table)
    if report.orphans:
        table = Table("provider", "job", "request key", "task", "status", "cost", "booked",
                      title="jobs found by the provider backstop (ledger reconcile)")
        for o in report.orphans:
            table.add_row(o.provider, o.job_id, o.request_key or "-", o.task_id or "none",
                          o.provider_status or "-", fmt_amount(o.cost) if o.cost is not None else "-",
                          "yes" if o.accounted else "no")
        console.print(table)
    others = {r.rule: r.task_ids for r in report.rules if r.violations and r.rule not in LEDGER_RULES}
    for rule, ids in others.items():
        console.print(f"[bold]{rule}[/]: {', '.join(ids)}", soft_wrap=True)
    scope = f" in {import_id}" if import_id else ""
    if report.ok:
        console.print(f"[green]ledger ok[/]: {report.tasks} tasks checked{scope}, "
                      f"{report.workflows_described} workflows asked")
        return
    tasks = len({t for r in report.rules for t in r.task_ids})
    violations = sum(r.violations for r in report.rules if r.checked)
    console.print(f"[bold red]{_n(violations, 'violation')}[/] in {_n(tasks, 'task')}{scope} "
                  f"({report.tasks} checked, {report.workflows_described} workflows asked)")


def attention(
    import_id: str | None = typer.Argument(None, help="limit to the tasks of one import"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """List the tasks waiting for an operator's decision (NEEDS_ATTENTION), with their evidence."""
    from schema.attention import needs_attention

    with Database(get_settings().database_url).transaction() as session:
        waiting = needs_attention(session, import_id)
    if as_json:
        emit_json({"total": len(waiting), "tasks": [t.model_dump(mode="json") for t in waiting]})
        return
    if not waiting:
        console.print("no task needs attention")
        return
    for t in waiting:
        console.print(f"[bold]{t.task_id}[/]  {said(t.product_id)}  stuck at [bold]{t.stuck or '?'}[/] since "
                      f"{t.since.isoformat(timespec='seconds') if t.since else '?'}  credit held {t.credit_held:g}"
                      f"  (workflow {t.workflow_id})")
        console.print(f"  evidence: {said(t.evidence or '-')}", soft_wrap=True)
        if t.last_error and t.last_error != t.evidence:
            console.print(f"  last error: {said(t.last_error)}", soft_wrap=True)
        if t.job_id or t.unknown_attempt:
            console.print(f"  live job: {t.job_id or '-'}   unknown submit: attempt {t.unknown_attempt or '-'}")
        if t.strays:
            console.print(f"  duplicate jobs the provider will not answer for: {', '.join(t.strays)}")
        table = Table("no", "state", "job", "provider status", "error")
        table.columns[4].overflow = "fold"
        for a in t.attempts:
            table.add_row(str(a.attempt_no), a.submit_state, a.provider_job_id or "-", a.provider_status or "-",
                          a.error or "")
        console.print(table)
        accept = ["--accept-duplicate-risk"] if t.stuck in ("reconcile", "stray") else []
        choices = ["--retry", *accept, '--fail --reason "..."']
        console.print(f"  decide: reelqueue resolve {t.task_id} " + " | ".join(choices), soft_wrap=True)
    console.print(f"{_n(len(waiting), 'task')} waiting for a decision")


def resolve(
    task_id: str = typer.Argument(..., help="a task in NEEDS_ATTENTION"),
    retry: bool = typer.Option(False, "--retry", help="run the stuck step again (poll, reconcile, cancel, stray)"),
    accept_duplicate_risk: bool = typer.Option(
        False, "--accept-duplicate-risk",
        help="give up on an unknown submit and submit anew (may pay twice); for a duplicate job the provider "
             "will not answer for, book its cost as unknown (the task's estimate)"),
    fail_task: bool = typer.Option(False, "--fail", help="end the task FAILED_FINAL (needs --reason)"),
    reason: str = typer.Option("", "--reason", help="why; kept in the task's state events"),
    by: str | None = typer.Option(None, "--by", help="who decides (default: your user name)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Decide on a NEEDS_ATTENTION task; its workflow carries the decision out."""
    from control.resolve import ResolveNotDelivered, ResolveRefused, UnknownTask, resolve_task

    chosen = [action for action, on in ((ResolveAction.RETRY, retry),
                                        (ResolveAction.ACCEPT_DUPLICATE_RISK, accept_duplicate_risk),
                                        (ResolveAction.FAIL, fail_task)) if on]
    if len(chosen) != 1:
        fail("choose exactly one of --retry, --accept-duplicate-risk, --fail", EXIT_BAD_INPUT, as_json=as_json)
    if chosen[0] is ResolveAction.FAIL and not reason.strip():
        fail("--fail needs --reason", EXIT_BAD_INPUT, as_json=as_json)
    request = ResolveRequest(action=chosen[0], reason=reason.strip(), by=by or user_name())
    try:
        outcome = asyncio.run(resolve_task(get_settings(), task_id, request))
    except (UnknownTask, ResolveRefused) as exc:
        fail(str(exc), EXIT_BAD_INPUT, as_json=as_json, task_id=task_id)
    except ResolveNotDelivered as exc:
        fail(str(exc), EXIT_FAILURE, as_json=as_json, task_id=task_id)
    if as_json:
        emit_json(outcome.model_dump(mode="json"))
    else:
        console.print(f"{task_id}: {outcome.message}; task is now {outcome.status}")


def renditions(
    task_id: str = typer.Argument(..., help="a task whose proxy exists"),
    retry: bool = typer.Option(False, "--retry", help="make the FAILED renditions again (HLS, thumbnail)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """A task's renditions (proxy, HLS, thumbnail) with status and error; --retry the failed ones."""
    from control.renditions import NothingToRetry, UnknownTask, read_renditions, retry_renditions

    settings = get_settings()
    try:
        report, _ = read_renditions(settings, task_id)
        if retry and report.failed:
            report = asyncio.run(retry_renditions(settings, task_id))
    except (UnknownTask, NothingToRetry) as exc:
        fail(str(exc), EXIT_BAD_INPUT, as_json=as_json, task_id=task_id)
    if as_json:
        emit_json(report.model_dump(mode="json"))
    else:
        table = Table("rendition", "status", "attempts", "error", title=f"task {task_id}")
        table.columns[3].overflow = "fold"
        for r in report.renditions:
            table.add_row(r.profile, r.status, str(r.attempts), said(r.verdict or r.error or ""))
        console.print(table)
        if retry and not report.retried:
            console.print("nothing to retry: no rendition is FAILED")
    if report.failed:
        raise typer.Exit(EXIT_FAILURE)


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def user_name() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name and no passwd entry (some containers)
        return "operator"
