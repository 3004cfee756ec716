"""Fault checks (on demand: `make fault-checks`): each timing-sensitive integration test, run on a copy
of the repository with one deliberate break in the code it covers, must fail at the check meant to
catch that break. A test that waits on state with a generous deadline could otherwise pass whatever
the code does; this shows that each one still can fail (tests/README.md, "Tests that can fail").

Each fault is a text replacement in one file of the copy (its text must occur there exactly once, so
a fault cannot go stale unnoticed: tests/unit/test_fault_checks.py checks that on every run). The
copy's code is the one imported by the test and by every process its stack starts (PYTHONPATH, and
the stack's services start from the copy's folder); the real tree is never touched, so the suite may
run beside this. Every run starts its own embedded stack.

    make fault-checks                       # all of them, --jobs at a time
    make fault-checks ARGS="--only breaker-grants-while-open --json"
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Fault:
    """One deliberate break (`old` -> `new` in `path`) and the test that must fail on it, at a
    failure whose text matches `fires` (the check meant to catch it, not an incidental error)."""

    name: str
    test: str
    path: str
    old: str
    new: str
    fires: str
    why: str


FAULTS: tuple[Fault, ...] = (
    Fault("breaker-grants-while-open",
          "tests/integration/test_provider_breaker_stack.py::"
          "test_a_failing_provider_opens_the_breaker_and_a_probe_closes_it",
          "workflows/provider_gate.py",
          "        if allowed is not None:\n            room = min(room, allowed)\n",
          "        if False:  # fault: the open breaker no longer holds grants back\n"
          "            room = min(room, allowed)\n",
          r"_settled\(|during\[\"submits\"\] == before\[\"submits\"\]",
          "the breaker opens but the gate goes on granting: never settled, or a submit sent while open"),
    Fault("lease-taken-back-unchecked",
          "tests/integration/test_admission_crash.py::test_slots_survive_a_sigkilled_worker_and_come_back",
          "workflows/provider_gate.py",
          "        if workflow.patched(LEASE_PROBE):\n",
          "        if False:  # fault: an expired lease is taken back without asking its holder\n",
          r"no check of the expired leases|max_alive",
          "slots of jobs still alive are granted again once their leases expire: no probe, the limit exceeded"),
    Fault("overview-never-refreshes",
          "tests/integration/test_spend_overview.py::"
          "test_overview_page_follows_a_run_to_the_figures_of_status_and_spend",
          "gateway/overview_page.py",
          "    refresh = f'<meta http-equiv=\"refresh\" content=\"{refresh_s}\">' if refresh_s else \"\"\n",
          "    refresh = \"\"  # fault: the page never reloads itself\n",
          r"_until_page",
          "the overview page keeps its first counts: the mid-run count never shows"),
    Fault("rate-off-by-one",
          "tests/integration/test_api_tenants.py::test_over_the_rate_is_429_with_retry_after",
          "gateway/tenancy.py",
          "    if counted.count > owner.rate_per_minute:\n",
          "    if counted.count > owner.rate_per_minute + 1:  # fault: one call a minute too many\n",
          r"assert limited is not None",
          "a tenant at 3 a minute gets a fourth call through"),
    Fault("status-waits-for-a-mute-gate",
          "tests/integration/test_cli_process.py::test_status_does_not_wait_out_a_gate_no_worker_serves",
          "control/gates.py",
          "result_type=GateSnapshot, rpc_timeout=timedelta(seconds=left),",
          "result_type=GateSnapshot,  # fault: the gate's query unbounded\n",
          r"status took",
          "`status` waits out Temporal's own query timeout on a gate no worker serves"),
    Fault("status-waits-for-temporal",
          "tests/integration/test_cli_process.py::test_status_does_not_wait_out_an_unreachable_temporal",
          "control/gates.py",
          "        client = await asyncio.wait_for(connect(settings), budget_s)\n    except (TimeoutError",
          "        client = await connect(settings, wait_s=60)  # fault: waits for Temporal, unbounded\n"
          "    except (TimeoutError",
          r"took < STATUS_WITHIN_S",
          "`status` keeps trying to reach Temporal instead of saying it is not reachable"),
    Fault("stream-cap-per-gateway",
          "tests/integration/test_event_streams_gateways.py::"
          "test_the_cap_holds_across_gateways_and_a_killed_gateways_streams_resume_on_the_other",
          "schema/stream_leases.py",
          "    if open_streams(session, tenant_id) >= cap:\n",
          "    if session.scalar(text('SELECT coalesce(sum(streams), 0) FROM stream_leases WHERE tenant_id = :t '\n"
          "                           'AND gateway_id = :g'), {'t': tenant_id, 'g': gateway_id}) >= cap:  # fault\n",
          r"_refused\(url_a, key\) == 429",
          "each gateway counts only its own streams: the sixth stream is let in on the other"),
    Fault("stream-joins-without-catching-up",
          "tests/integration/test_event_streams_gateways.py::"
          "test_the_cap_holds_across_gateways_and_a_killed_gateways_streams_resume_on_the_other",
          "gateway/v1/events.py",
          "        upto = None if stream.own is not None else position.text\n",
          "        upto = None  # fault: a stream takes the feed's events without reading up to the feed first\n",
          r"events lost",
          "a stream resumed on another gateway misses what was committed between its id and that feed's position"),
    Fault("stalled-stream-never-ended",
          "tests/integration/test_event_streams_gateways.py::"
          "test_a_client_that_stops_reading_is_ended_and_the_others_are_not_slowed",
          "gateway/event_hub.py",
          "        \"\"\"Ends the stream; a slow one's write under way is given up at once.\"\"\"\n",
          "        if why == \"slow\":  # fault: a client that stops reading keeps its stream\n            return\n",
          r"stalled stream ended",
          "a client that stops reading keeps its stream (and its place, and a queue that grows)"),
    Fault("stopping-gateway-waits-for-streams",
          "tests/integration/test_event_streams_gateways.py::test_a_stopping_gateway_ends_its_streams_at_once",
          "gateway/__main__.py",
          "            hub.end_all(\"shutdown\")\n",
          "            pass  # fault: the streams are left to uvicorn's graceful shutdown\n",
          r"waited for its open stream",
          "SIGTERM leaves the streams open: uvicorn waits for them, the clients stay on a stopping gateway"),
    Fault("session-stream-outlives-sign-out",
          "tests/integration/test_event_streams_gateways.py::test_a_signed_out_browser_session_ends_its_stream",
          "gateway/event_hub.py",
          "            if stream.key_id in revoked or stream.session in revoked:\n",
          "            if stream.key_id in revoked:  # fault: a browser session's end is not looked at\n",
          r"goes on after its session ended",
          "a signed-out browser's stream goes on until its 30 minutes are up"),
    Fault("active-gauge-shows-the-limit",
          "tests/integration/test_metrics.py::test_worker_and_gateway_metrics_follow_the_run",
          "metrics/collector.py",
          "active.add_metric([provider], sum(by_status.get(s.value, (0.0, 0.0))[0] for s in PROVIDER_ACTIVE))",
          "active.add_metric([provider], (limits.get(provider) or ProviderLimits()).max_concurrent)  # fault",
          r"seen_active - active_before",
          "the slot gauge reports the configured limit (20), which the old bound `<= 20` let pass"),
)


@dataclass
class Outcome:
    """What one fault's run came to: `caught` when its test failed at the check meant to fire."""

    fault: str
    test: str
    outcome: str  # failed / passed / error / skipped / no result
    caught: bool
    seconds: float
    message: str
    log: str


def break_copy(fault: Fault, into: Path) -> None:
    """The repository's files (tracked and new, as they are now) copied into `into`, with the fault in."""
    listed = subprocess.run(["git", "ls-files", "-z", "-c", "-o", "--exclude-standard"], cwd=REPO, check=True,
                            capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    target = into / fault.path
    text = target.read_text()
    if text.count(fault.old) != 1:
        raise SystemExit(f"{fault.name}: its text occurs {text.count(fault.old)} times in {fault.path}, not once")
    target.write_text(text.replace(fault.old, fault.new))


def run(fault: Fault, workdir: Path, timeout_s: float) -> Outcome:
    """The fault's test, once, on a broken copy, in a pytest process and embedded stack of its own."""
    copy = workdir / fault.name
    break_copy(fault, copy)
    env = {**os.environ, "PYTHONPATH": str(copy)}
    where = subprocess.run([sys.executable, "-c", "import workflows; print(workflows.__file__)"], cwd=copy, env=env,
                           capture_output=True, text=True, check=True).stdout.strip()
    if not where.startswith(str(copy)):
        raise SystemExit(f"the copy's code would not be the one run (workflows from {where})")
    report, log = workdir / f"{fault.name}.xml", workdir / f"{fault.name}.log"
    started = time.monotonic()
    with log.open("w") as out:
        tested = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", fault.test,
                                   f"--basetemp={workdir / (fault.name + '-tmp')}", f"--junitxml={report}"],
                                  cwd=copy, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            tested.wait(timeout_s)
        except subprocess.TimeoutExpired:  # interrupted, so that pytest still stops the stack it started
            tested.send_signal(signal.SIGINT)
            try:
                tested.wait(120)
            except subprocess.TimeoutExpired:
                tested.kill()
                tested.wait()
    outcome, message = _read_report(report)
    caught = outcome == "failed" and re.search(fault.fires, message) is not None
    return Outcome(fault.name, fault.test, outcome, caught, round(time.monotonic() - started, 1),
                   _failure_line(message), str(log))


def _read_report(report: Path) -> tuple[str, str]:
    """(outcome, failure text) of the one test case in a JUnit report."""
    if not report.is_file():
        return "no result", ""
    case = ET.parse(report).find(".//testcase")
    if case is None:
        return "no result", ""
    for tag, outcome in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
        found = case.find(tag)
        if found is not None:
            return outcome, f"{found.get('message', '')}\n{found.text or ''}"
    return "passed", ""


def _failure_line(message: str) -> str:
    """The failing assertion's line (pytest marks it `>`), and the error line under it."""
    lines = message.splitlines()
    marked = [i for i, line in enumerate(lines) if line.startswith(">")]
    if not marked:
        return lines[0][:300] if lines else ""
    at = marked[-1]
    errors = [line for line in lines[at:] if line.startswith("E ")][:2]
    return " | ".join([lines[at].strip(), *(e.strip() for e in errors)])[:500]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", choices=[f.name for f in FAULTS], help="these faults alone")
    parser.add_argument("--jobs", type=int, default=3, help="faults run at once (each starts a stack)")
    parser.add_argument("--timeout", type=float, default=1500, help="seconds for one fault's run")
    parser.add_argument("--workdir", type=Path, help="keep the copies, logs and reports here")
    parser.add_argument("--json", action="store_true", help="the outcomes as JSON on stdout")
    args = parser.parse_args(argv)
    faults = [f for f in FAULTS if not args.only or f.name in args.only]
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="reelqueue-faults-"))
    workdir.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        outcomes = list(pool.map(lambda f: run(f, workdir, args.timeout), faults))
    if args.json:
        print(json.dumps([asdict(o) for o in outcomes], indent=2))
    else:
        for o in outcomes:
            print(f"{'caught' if o.caught else 'MISSED':7} {o.fault:30} {o.outcome:8} {o.seconds:7.1f} s  {o.message}")
        print(f"logs and reports: {workdir}")
    return 0 if all(o.caught for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
