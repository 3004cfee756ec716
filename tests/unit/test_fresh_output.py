"""FreshOutput: when a provider's output URL is asked for again, and how often at most."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from temporalio.exceptions import ApplicationError

from activities.errors import OUTPUT_UNAVAILABLE
from activities.fetch import FreshOutput, _progress, resumed_output
from adapters.fetcher import FetchFailed
from adapters.providers.base import JobState, OutputRef
from contracts.provider import JobStatus

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


class _Provider:
    """Answers status calls with the given expiries, one per call (the last one repeats)."""

    name = "p"

    def __init__(self, expiries: list[timedelta | None], status: JobStatus = JobStatus.SUCCEEDED) -> None:
        self.expiries, self.status, self.calls = expiries, status, 0

    def get_job(self, job_id: str) -> JobState:
        left = self.expiries[min(self.calls, len(self.expiries) - 1)]
        self.calls += 1
        output = OutputRef(url=f"https://cdn.test/{job_id}.mp4?sig={self.calls}",
                           expires_at=None if left is None else NOW + left)
        return JobState(provider="p", job_id=job_id, status=self.status, raw_status=self.status.value,
                        outputs=[output] if self.status is JobStatus.SUCCEEDED else [])


def fresh(provider: _Provider, refreshes: int = 3) -> FreshOutput:
    return FreshOutput(provider, "j1", refreshes=refreshes, margin_s=30, now=lambda: NOW)  # type: ignore[arg-type]


def test_a_url_about_to_expire_is_asked_for_again_before_fetching() -> None:
    provider = _Provider([timedelta(seconds=10), timedelta(seconds=5), timedelta(hours=1)])
    source = fresh(provider)
    assert source.usable().url.endswith("sig=3") and (source.refreshes, provider.calls) == (2, 3)


def test_without_a_known_expiry_or_with_time_left_the_first_url_is_used() -> None:
    for expiry in (None, timedelta(minutes=10)):
        provider = _Provider([expiry])
        assert fresh(provider).usable().url.endswith("sig=1") and provider.calls == 1


def test_refreshes_are_bounded_then_the_url_is_tried_anyway() -> None:
    provider = _Provider([timedelta(seconds=1)])
    source = fresh(provider, refreshes=2)
    assert source.usable().url.endswith("sig=3") and provider.calls == 3
    assert not source.expired(FetchFailed("x", retryable=False, status=403))


@pytest.mark.parametrize("status, refreshed", [(403, True), (404, True), (410, True), (500, False), (401, False)])
def test_stale_link_statuses_get_a_fresh_url(status: int, refreshed: bool) -> None:
    provider = _Provider([timedelta(hours=1)])
    source = fresh(provider)
    assert source.expired(FetchFailed("x", retryable=False, status=status)) is refreshed
    assert provider.calls == (2 if refreshed else 1)


def test_a_job_without_output_is_a_business_failure() -> None:
    with pytest.raises(ApplicationError) as info:
        fresh(_Provider([None], status=JobStatus.FAILED))
    assert info.value.type == OUTPUT_UNAVAILABLE and info.value.non_retryable


def test_a_url_from_an_earlier_tries_heartbeat_is_used_without_a_status_call() -> None:
    provider = _Provider([timedelta(hours=1)])
    known = OutputRef(url="https://cdn.test/j1.mp4?sig=0", expires_at=NOW + timedelta(minutes=10))
    source = FreshOutput(provider, "j1", refreshes=3, margin_s=30, now=lambda: NOW, known=known)  # type: ignore[arg-type]
    assert source.usable() == known and source.resumed and provider.calls == 0
    # ... and it is still asked for afresh once it turns out stale
    assert source.expired(FetchFailed("x", retryable=False, status=403)) and provider.calls == 1


def test_the_heartbeat_a_resumed_fetch_reads() -> None:
    output = OutputRef(url="https://cdn.test/j1.mp4", expires_at=NOW)
    beat = _progress(output, 1024)
    assert beat["bytes"] == 1024 and resumed_output([beat]) == output
    for details in ([], ["output URL refreshed"], [{"bytes": 1}], [{"output": {"no": "url"}}]):
        assert resumed_output(details) is None  # no heartbeat, or one from before the URL was in it
