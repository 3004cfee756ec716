"""`reelqueue drill [POINT ...]`: crash a real worker at each failpoint and check the recovery.

Parsing and printing only; the drills themselves are devstack/drill.py.
"""

from __future__ import annotations

import asyncio

import typer
from rich.table import Table

from cli.output import EXIT_BAD_INPUT, EXIT_FAILURE, console, emit_json, err_console, fail
from config.settings import Settings


def drill(
    points: list[str] | None = typer.Argument(None, help="failpoints to drill (default: all of them)"),
    parallel: int = typer.Option(0, "--parallel", "-p", min=0,
                                 help="drills at a time (0 = all at once; 1 = one after another)"),
    reach_timeout: float = typer.Option(120, "--reach-timeout", help="seconds for the armed worker to die"),
    recovery_timeout: float = typer.Option(180, "--recovery-timeout", help="seconds for the clean worker to finish"),
    chaos: bool = typer.Option(False, "--chaos", help="the chaos run instead (bench/chaos.py, `make chaos`) on "
                               "this stack: tasks through worker kills, service restarts and provider faults"),
    tasks: int = typer.Option(1000, "--tasks", min=1, help="with --chaos: tasks in the run"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Arm each failpoint (crash) in a real worker process, let it die, recover with a clean worker, check
    the task ends SUCCEEDED with one provider job and a balanced ledger. Needs the stack (reelqueue dev up)."""
    from devstack.drill import POINTS, DrillError, check_points, preflight, run_drills

    try:
        wanted = check_points(points or [])
    except DrillError as exc:
        fail(str(exc), EXIT_BAD_INPUT, as_json=as_json)
    settings = Settings()
    try:
        preflight(settings)
    except DrillError as exc:
        fail(str(exc), EXIT_FAILURE, as_json=as_json)
    if chaos:
        _chaos(settings, tasks, as_json)
        return
    if not as_json:
        console.print(f"drilling {len(wanted)} failpoint(s) of {len(POINTS)}: {', '.join(wanted)} "
                      f"({'all at once' if parallel in (0, len(wanted)) else f'{parallel} at a time'}) ...")

    def progress(result) -> None:  # noqa: ANN001 - DrillResult
        if not as_json:
            mark = "[green]ok[/]" if result.ok else "[red]FAILED[/]"
            console.print(f"  {result.point}: {mark} ({result.seconds.get('total', 0):.0f} s)")

    try:
        results = asyncio.run(run_drills(settings, wanted, parallel=parallel, reach_timeout_s=reach_timeout,
                                         recovery_timeout_s=recovery_timeout, on_result=progress))
    except DrillError as exc:
        fail(str(exc), EXIT_FAILURE, as_json=as_json)
    except asyncio.CancelledError:  # SIGTERM: the drills stopped every worker they had started
        fail("interrupted; every worker the drills started was stopped", EXIT_FAILURE, as_json=as_json)
    ok = all(r.ok for r in results)
    if as_json:
        emit_json({"drills": [r.model_dump(mode="json") for r in results], "ok": ok})
    else:
        _print_table(results)
    if not ok:
        raise typer.Exit(EXIT_FAILURE)


def _print_table(results) -> None:  # noqa: ANN001 - list[DrillResult]
    table = Table("point", "evidence on recovery", "outcome", "provider jobs", "ledger balanced", "invariants",
                  "to crash / recovery (s)", title="crash drills")
    for r in results:
        outcome = r.outcome if r.ok else f"[red]{r.outcome}[/]"
        jobs = "-" if r.provider_jobs is None else str(r.provider_jobs)
        secs = f"{r.seconds.get('to_failpoint', '-')} / {r.seconds.get('recovery', '-')}"
        broken = [f"{rule} {n}" for rule, n in r.invariants.items()] + [f"{u.split(':')[0]} unchecked"
                                                                       for u in r.invariants_unchecked]
        invariants = f"[red]{', '.join(broken)}[/]" if broken else "ok"
        table.add_row(r.point, r.evidence_text, outcome, jobs, "yes" if r.ledger_balanced else "[red]no[/]",
                      invariants, secs)
    console.print(table)
    for r in results:
        if not r.ok:
            err_console.print(f"[bold red]{r.point}:[/] {r.error or 'checks failed'}; task {r.task_id}; "
                              f"logs {r.logs}", soft_wrap=True)
    passed = sum(r.ok for r in results)
    style = "bold green" if passed == len(results) else "bold red"
    console.print(f"{passed}/{len(results)} drills passed", style=style)


def _chaos(settings: Settings, tasks: int, as_json: bool) -> None:
    """`drill --chaos`: bench/chaos.py's run on the running stack, its defaults but the task count."""
    from bench.chaos import ChaosOptions, print_report, run_chaos, run_folder

    folder = run_folder(settings)
    say = (lambda _: None) if as_json else err_console.print
    try:
        report = asyncio.run(run_chaos(settings, ChaosOptions(tasks=tasks), folder, say))
    except asyncio.CancelledError:
        fail("interrupted; every worker the chaos run started was stopped", EXIT_FAILURE, as_json=as_json)
    if as_json:
        emit_json(report.model_dump(mode="json") | {"kills_by_activity": report.kills_by_activity()})
    else:
        print_report(report, console)
        console.print(f"logs: {folder}")
    if not report.ok:
        raise typer.Exit(EXIT_FAILURE)
