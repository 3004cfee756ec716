"""The crash drill's pure parts: the armed worker's environment, point names, the evidence line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from activities.failpoints import ENV, POINTS
from config.settings import Settings
from devstack.drill import DrillError, check_points, evidence_text, worker_env


def test_worker_env_spells_out_every_setting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv(ENV, "mid_poll=crash")  # never inherited: only the armed worker gets one
    parent = Settings(home=tmp_path / "stack", database_url="postgresql+psycopg://u@127.0.0.1:5999/db",
                      s3_secure=True, fetch_allowed_hosts=["127.0.0.1:9000"], tenant_credit_limit=12.5)
    home = tmp_path / "drill" / "crash"
    env = worker_env(parent, home, "drill-q", {})
    assert ENV not in env
    assert env["REELQUEUE_HOME"] == str(home) and env["REELQUEUE_TASK_QUEUE"] == "drill-q"

    for key in list(os.environ):
        if key.startswith("REELQUEUE_") or key == "DATABASE_URL":
            monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        if key.startswith("REELQUEUE_"):
            monkeypatch.setenv(key, value)
    child = Settings()  # what worker.py reads: no stack.json in its home, everything from the env
    assert child.home == home
    assert child.task_queue == "drill-q"
    expected = parent.model_dump(exclude={"home", "task_queue"})
    assert child.model_dump(exclude={"home", "task_queue"}) == expected


def test_armed_env_carries_the_failpoint(tmp_path: Path):
    env = worker_env(Settings(home=tmp_path), tmp_path / "w", "q", {ENV: "before_submit=crash"})
    assert env[ENV] == "before_submit=crash"


def test_points_default_to_all_and_unknown_ones_are_refused():
    assert check_points([]) == list(POINTS)
    assert check_points(["mid_poll"]) == ["mid_poll"]
    with pytest.raises(DrillError, match="unknown failpoint"):
        check_points(["mid_poll", "nope"])


def test_evidence_line():
    ev = {
        "status": "DISPATCHING",
        "attempts": [{"attempt_no": 1, "submit_state": "SENDING", "provider_job_id": None}],
        "provider_jobs": 1, "assets": {}, "objects": {"raw": 1}, "ledger": {"RESERVE": 2.0},
    }
    assert evidence_text(ev) == ("DISPATCHING; a1 SENDING, no job id; 1 provider job; rows -; objects raw 1; "
                                 "ledger RESERVE")
    assert evidence_text({}) == "-"
