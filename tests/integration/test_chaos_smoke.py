"""The chaos run (bench/chaos.py, `make chaos`) once at a tiny size on a stack of its own: it kills
workers, restarts every service and cuts the provider off while provider jobs are in flight (the
first jobs last long enough to see the whole round through), injects provider faults at its default
rates, and every task succeeds with no invariant violated, the slot rule asking the run's own gates.
A smoke run: the figures at size are in docs/reliability.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.chaos import SERVICES

pytestmark = [pytest.mark.integration, pytest.mark.long]

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(660)  # the run's own 600 s bound decides; 300 s passed once the suite loaded 2 cores to 20
def test_a_tiny_chaos_run_violates_no_invariant() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REELQUEUE_") and k != "DATABASE_URL"}
    args = ["--tasks", "8", "--workers", "2", "--kill-every", "2", "--gap", "2", "--outage", "5", "--limit", "8",
            "--load-job-seconds", "90", "--job-seconds", "3", "--recovery-timeout", "60", "--drain-timeout", "300",
            "--json"]
    done = subprocess.run([sys.executable, "-m", "bench.chaos", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, f"chaos run failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    report = json.loads(done.stdout)  # stdout is the report alone (telemetry/core_logs.py)
    assert report["ok"] and report["violations"] == 0, report["invariants"]
    assert report["invariants"] and all(rule["checked"] and rule["violations"] == 0 for rule in report["invariants"])
    assert report["by_status"] == {"SUCCEEDED": 8}, report["by_status"]
    gates = next(r for r in report["invariants"] if r["rule"] == "gate_slots")["detail"]
    assert report["queue"].startswith("chaos-") and f"gate-emulator-{report['queue']}: 0 slots held" in gates, gates
    assert len(report["kills"]) >= 3, report["kills"]
    assert sorted(r["service"] for r in report["restarts"]) == sorted(SERVICES), report["restarts"]
    assert all(r["error"] is None for r in report["restarts"]), report["restarts"]
    assert all(r["in_flight"] > 0 for r in report["restarts"]), report["restarts"]  # each one hit running jobs
    assert report["outage"]["in_flight"] > 0, report["outage"]
    assert sum(report["faults"].values()) > 0, report["faults"]  # the default rates applied some faults
    assert report["spend"]["provider_total"] > 0 and 0 <= report["spend"]["wasted_share"] <= 1
