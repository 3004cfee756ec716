"""The chaos run (bench/chaos.py, `make chaos`) once at a tiny size on a stack of its own: it kills
workers, restarts every service, injects provider faults at its default rates, and finds no invariant
violated. A smoke run: the figures at size are in docs/reliability.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.chaos import ENDED, SERVICES

pytestmark = [pytest.mark.integration, pytest.mark.long]

REPO = Path(__file__).resolve().parents[2]


def test_a_tiny_chaos_run_violates_no_invariant() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REELQUEUE_") and k != "DATABASE_URL"}
    args = ["--tasks", "8", "--workers", "2", "--kill-every", "2", "--gap", "2", "--outage", "5", "--limit", "8",
            "--load-job-seconds", "5", "--job-seconds", "3", "--recovery-timeout", "60", "--drain-timeout", "300",
            "--json"]
    done = subprocess.run([sys.executable, "-m", "bench.chaos", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, f"chaos run failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    report = json.loads(done.stdout)  # stdout is the report alone (telemetry/core_logs.py)
    assert report["ok"] and report["violations"] == 0, report["invariants"]
    assert report["invariants"] and all(rule["checked"] and rule["violations"] == 0 for rule in report["invariants"])
    assert sum(report["by_status"].values()) == 8 and set(report["by_status"]) <= set(ENDED), report["by_status"]
    assert len(report["kills"]) >= 3 and all(kill["pid"] > 0 for kill in report["kills"])
    assert sorted(r["service"] for r in report["restarts"]) == sorted(SERVICES), report["restarts"]
    assert all(r["error"] is None for r in report["restarts"]), report["restarts"]
    assert report["outage"]["seconds"] == 5 and report["faults"]["outage_refusals"] >= 0
    assert sum(report["faults"].values()) > 0, report["faults"]  # the default rates applied some faults
    assert report["spend"]["provider_total"] > 0 and 0 <= report["spend"]["wasted_share"] <= 1
