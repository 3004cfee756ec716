"""Each benchmark script runs once at a tiny size (benchmarks are not tests: this only shows they
still start their stack, do their work and print their figures)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.long]

REPO = Path(__file__).resolve().parents[2]


def bench(*args: str, timeout: float = 600) -> str:
    """`python -m bench.X ...` in a child with none of this session's stack settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REELQUEUE_") and k != "DATABASE_URL"}
    done = subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def last_json(out: str) -> dict:
    """The JSON object a benchmark prints last (indented, from a line that is just `{`)."""
    return json.loads(out[0 if out.startswith("{") else out.rindex("\n{\n") + 1:])


def test_import_and_run_benchmarks() -> None:
    out = bench("bench.import_bench", "--rows", "50")
    assert "400 tasks (400 new)" in out and "same import True, 0 new tasks" in out, out
    out = bench("bench.run_bench", "start", "--tasks", "16")
    assert "16 workflows started" in out, out
    out = bench("bench.run_bench", "complete", "--tasks", "2")
    assert "2 tasks in" in out and "'SUCCEEDED': 2" in out, out


def test_webhook_pipeline_and_capacity_benchmarks() -> None:
    out = bench("bench.webhook_bench", "--tasks", "4", "--webhooks", "16", "--concurrency", "2", "--repeats", "8",
                "--duplicates", "4", "--probe", "4")
    webhooks = json.loads(out.strip().splitlines()[-1])
    assert [level["non_2xx"] for level in webhooks["levels"]] == [0], out
    pipeline = last_json(bench("bench.pipeline", "--tasks", "3", "--engine-workflows", "3"))
    assert pipeline["pipeline"]["by_status"] == {"SUCCEEDED": 3}
    assert [run["workflows"] for run in pipeline["engine"]["runs"]] == [3, 3, 3]
    assert pipeline["ratio"] > 0 and pipeline["cpu_s_per_task"]["ffmpeg"] > 0
    assert pipeline["worker_metrics"]["submits_per_task"] == 1.0
    # lean-path-v1: prepare, the gate's ask, submit, a status call, fetch, the media step
    assert pipeline["activities_per_task"] >= 6 and pipeline["history_events_per_task"] > 0
    assert pipeline["orchestration_ratio"] > 0 and pipeline["engine_cpu_s_per_step"] > 0
    assert pipeline["orchestration_ratio_comparable"] is False  # engine runs under 200 workflows
    assert pipeline["billable_actions_by_kind_per_task"]["workflow_started"] >= 1
    assert pipeline["billable_actions_per_task"] > pipeline["activities_per_task"]
    capacity = last_json(bench("bench.capacity", "--rate", "1", "--minutes", "0.1", "--provider-seconds", "2",
                               "--limit", "10", "--webhooks", "on", "--drain-s", "90", "--sample-s", "1"))
    (mode,) = capacity["modes"]
    assert mode["by_status"] == {"SUCCEEDED": mode["tasks"]} and mode["submits_per_task"] == 1.0
    assert mode["max_in_flight"] >= 1 and mode["peaks"]["worker_rss_mib"] > 0
