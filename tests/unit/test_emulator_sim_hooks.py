"""The emulator's after-the-fact hooks, on its app without background threads (jobs stay queued
unless a test moves them): a cancel that loses the race, and `POST /_sim/jobs/{id}`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from emulator.app import create_app

AUTH = {"Authorization": "Bearer k"}


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[TestClient]:
    yield TestClient(create_app(data_dir=tmp_path / "emulator", port=8999, webhook_secret="whsec_" + "A" * 43 + "="))


def _job(client: TestClient) -> str:
    answer = client.post("/_sim/jobs", json={"request_key": "k-a1", "model": "emu-1", "prompt": "p",
                                              "aspect_ratio": "9:16", "duration_s": 1})
    answer.raise_for_status()
    return answer.json()["id"]


def _status(client: TestClient, job_id: str) -> str:
    return client.get(f"/v1/jobs/{job_id}", headers=AUTH).json()["status"]


def test_a_cancel_that_loses_the_race_answers_canceled_and_the_job_lives_on(emulator: TestClient) -> None:
    job_id = _job(emulator)
    emulator.post("/_sim/faults", json={"cancel_lost_race": 1}).raise_for_status()
    assert emulator.post(f"/v1/jobs/{job_id}/cancel", headers=AUTH).json()["status"] == "canceled"
    assert _status(emulator, job_id) == "queued"
    assert emulator.get("/_sim/faults").json()["cancel_lost_race"] == 0  # one cancel only
    assert emulator.post(f"/v1/jobs/{job_id}/cancel", headers=AUTH).json()["status"] == "canceled"
    assert _status(emulator, job_id) == "canceled"


def test_changes_after_the_fact_need_a_known_job_in_the_right_state(emulator: TestClient) -> None:
    assert emulator.post("/_sim/jobs/job_none", json={"cost": 1.0}).status_code == 404
    job_id = _job(emulator)  # queued: neither succeeded (cost) nor running (finish_now)
    assert emulator.post(f"/_sim/jobs/{job_id}", json={"cost": 1.0}).status_code == 409
    assert emulator.post(f"/_sim/jobs/{job_id}", json={"finish_now": True}).status_code == 409
    assert emulator.post(f"/_sim/jobs/{job_id}", json={"cost": -1}).status_code == 422
    assert _status(emulator, job_id) == "queued"
