"""The priority of an output's fetch from the time its provider URL has left (workflows/queues.py), and
the expiry a status call hands the workflow for it (activities/poll.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from activities.poll import _result
from adapters.providers.base import JobState, OutputRef
from contracts.provider import JobStatus
from workflows.queues import fetch_priority

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


@pytest.mark.parametrize(("left", "key"), [
    (timedelta(minutes=-5), 1), (timedelta(minutes=14, seconds=59), 1), (timedelta(minutes=15), 2),
    (timedelta(minutes=59), 2), (timedelta(hours=1), None), (timedelta(days=2), None),
])
def test_the_sooner_the_url_expires_the_lower_the_key(left: timedelta, key: int | None):
    assert fetch_priority(NOW + left, NOW).priority_key == key


def test_an_unknown_expiry_keeps_the_default():
    assert fetch_priority(None, NOW).priority_key is None


def test_a_succeeded_status_call_carries_its_output_expiry_as_utc():
    naive = datetime(2026, 1, 1, 12, 30)
    state = JobState(job_id="j", provider="p", status=JobStatus.SUCCEEDED, raw_status="succeeded",
                     outputs=[OutputRef(url="https://cdn.example.com/v.mp4", expires_at=naive)])
    assert _result(state).output_expires_at == naive.replace(tzinfo=UTC)
    running = state.model_copy(update={"status": JobStatus.RUNNING, "outputs": []})
    assert _result(running).output_expires_at is None
