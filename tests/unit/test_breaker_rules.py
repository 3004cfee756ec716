"""The provider breaker's rules (workflows/breaker.py) and what counts as a submit failure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from config.defaults import BreakerPolicy
from contracts.admission import BreakerMode, BreakerState, submit_failure
from contracts.provider import SubmitOutcome
from workflows import breaker

T0 = datetime(2026, 12, 1, tzinfo=UTC)
POLICY = BreakerPolicy(failures=3, failure_ratio=0.5, window_s=60, cooldown_s=30)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def feed(state: BreakerState, outcomes: list[str | None], every_s: float = 1.0) -> None:
    for i, failure in enumerate(outcomes):
        breaker.record(state, POLICY, at(i * every_s), f"w{i}", failure)


@pytest.mark.parametrize(("outcome", "status", "counted"), [
    (SubmitOutcome.REJECTED_RETRYABLE, 503, "http_503"),  # a provider-shaped 5xx refusal
    (SubmitOutcome.UNKNOWN, 502, "http_502"),  # a 5xx from something in between: the job may exist
    (SubmitOutcome.UNKNOWN, None, "timeout"),  # sent, no answer
    (SubmitOutcome.REJECTED_RETRYABLE, 408, "timeout"),
    (SubmitOutcome.REJECTED_RETRYABLE, None, "unreachable"),  # no connection
    (SubmitOutcome.REJECTED_RETRYABLE, 429, None),  # busy is an answer: AIMD's business, not the breaker's
    (SubmitOutcome.REJECTED_FINAL, 422, None),
    (SubmitOutcome.ACCEPTED, 201, None),
])
def test_what_counts_as_a_failure(outcome, status, counted):
    assert submit_failure(outcome, status) == counted


def test_it_opens_at_the_threshold_when_failures_are_the_share_asked():
    state = BreakerState()
    feed(state, ["http_503", "http_503"])
    assert state.mode is BreakerMode.CLOSED and breaker.room(state, at(2)) is None
    breaker.record(state, POLICY, at(2), "w", "timeout")
    assert (state.mode, state.open_until, state.opens, state.last_failure) == (BreakerMode.OPEN, at(32), 1, "timeout")
    assert breaker.room(state, at(31)) == 0


def test_a_few_failures_among_many_successes_or_spread_out_keep_it_closed():
    busy = BreakerState()
    feed(busy, [None] * 4 + ["http_503"] * 3)  # 3 of 7: under half
    spread = BreakerState()
    feed(spread, ["http_503"] * 3, every_s=40)  # never 3 within 60 s
    assert busy.mode is BreakerMode.CLOSED and spread.mode is BreakerMode.CLOSED
    assert breaker.failures(spread, POLICY, at(80)) == 2


def test_open_ignores_late_outcomes_and_half_opens_for_one_probe_after_the_cool_down():
    state = BreakerState()
    feed(state, ["http_503"] * 3)
    assert not breaker.record(state, POLICY, at(5), "late", None)  # sent before it opened
    assert state.mode is BreakerMode.OPEN
    assert breaker.room(state, at(32)) == 1 and state.mode is BreakerMode.HALF_OPEN
    state.probe = "p"
    assert breaker.room(state, at(33)) == 0  # one probe at a time
    assert not breaker.record(state, POLICY, at(34), "other", None)  # not the probe: changes nothing
    assert breaker.record(state, POLICY, at(35), "p", None)
    assert (state.mode, state.open_until, state.probe) == (BreakerMode.CLOSED, None, None)
    assert breaker.room(state, at(35)) is None


def test_a_failed_probe_reopens_for_a_new_cool_down():
    state = BreakerState()
    feed(state, ["http_503"] * 3)
    breaker.room(state, at(40))
    state.probe = "p"
    assert breaker.record(state, POLICY, at(41), "p", "http_500")
    assert (state.mode, state.open_until, state.opens) == (BreakerMode.OPEN, at(71), 2)


def test_a_probe_given_back_unused_lets_another_go():
    state = BreakerState()
    feed(state, ["http_503"] * 3)
    breaker.room(state, at(40))
    state.probe = "p"
    breaker.forget(state, "someone-else")
    assert breaker.room(state, at(41)) == 0
    breaker.forget(state, "p")
    assert breaker.room(state, at(42)) == 1


def test_a_busy_window_keeps_only_the_newest_outcomes():
    state = BreakerState()
    feed(state, [None] * (breaker.OUTCOMES_KEPT + 100), every_s=0.01)
    assert len(state.outcomes) == breaker.OUTCOMES_KEPT
