"""A provider's circuit breaker, moved by its gate (workflows/provider_gate.py): pure and
deterministic, every time passed in (docs/architecture.md, "Provider breaker")."""

from __future__ import annotations

from datetime import datetime, timedelta

from config.defaults import BreakerPolicy
from contracts.admission import BreakerMode, BreakerState

# Outcomes kept for the window at most (the newest): the gate carries them across continue-as-new,
# and a busy provider's minute of submits must not make that payload large.
OUTCOMES_KEPT = 500


def _open(state: BreakerState, policy: BreakerPolicy, now: datetime) -> None:
    state.mode, state.open_until, state.probe = BreakerMode.OPEN, now + timedelta(seconds=policy.cooldown_s), None
    state.outcomes = []
    state.opens += 1


def _close(state: BreakerState) -> None:
    state.mode, state.open_until, state.probe, state.outcomes = BreakerMode.CLOSED, None, None, []


def failures(state: BreakerState, policy: BreakerPolicy, now: datetime) -> int:
    """Submit failures within the window (closed). Reads only: a query may call it."""
    cutoff = now - timedelta(seconds=policy.window_s)
    return sum(failed for at, failed in state.outcomes if at > cutoff)


def record(state: BreakerState, policy: BreakerPolicy, now: datetime, holder: str, failure: str | None) -> bool:
    """A submit's outcome under `holder`'s slot (`failure` None: the provider answered); True when
    the mode changed. Closed: counted in the window, and enough failures open it. Half-open: only the
    probe's outcome counts, closing or re-opening. Open: late outcomes of submits sent before it
    opened change nothing."""
    if failure is not None:
        state.last_failure = failure
    if state.mode is BreakerMode.CLOSED:
        cutoff = now - timedelta(seconds=policy.window_s)
        kept = [o for o in state.outcomes[-(OUTCOMES_KEPT - 1):] if o[0] > cutoff]
        state.outcomes = [*kept, (now, failure is not None)]
        failed = failures(state, policy, now)
        if failure is not None and failed >= policy.failures and failed >= policy.failure_ratio * len(state.outcomes):
            _open(state, policy, now)
            return True
        return False
    if state.mode is BreakerMode.HALF_OPEN and holder == state.probe:
        if failure is None:
            _close(state)
        else:
            _open(state, policy, now)
        return True
    return False


def forget(state: BreakerState, holder: str) -> None:
    """The probe's slot came back with no submit outcome (cancelled, paused, gone): a new probe may go."""
    if state.mode is BreakerMode.HALF_OPEN and state.probe == holder:
        state.probe = None


def mode_at(state: BreakerState, now: datetime) -> BreakerMode:
    """The mode now: an open breaker whose cool-down has passed is half-open (reads only)."""
    if state.mode is BreakerMode.OPEN and now >= state.open_until:
        return BreakerMode.HALF_OPEN
    return state.mode


def room(state: BreakerState, now: datetime) -> int | None:
    """How many slots for new submits the breaker allows now (None: no limit of its own); once the
    cool-down has passed it half-opens and allows the one probe."""
    state.mode = mode_at(state, now)
    if state.mode is BreakerMode.CLOSED:
        return None
    if state.mode is BreakerMode.HALF_OPEN and state.probe is None:
        return 1
    return 0


def describe(state: BreakerState, policy: BreakerPolicy, now: datetime) -> str:
    """One line for the gate's Web UI details."""
    mode = mode_at(state, now)
    if mode is BreakerMode.OPEN:
        return (f"open until {state.open_until:%H:%M:%S} UTC (opened {state.opens}x; last failure "
                f"{state.last_failure})")
    if mode is BreakerMode.HALF_OPEN:
        return f"half-open: probe {'sent by ' + state.probe if state.probe else 'next'}"
    return f"closed ({failures(state, policy, now)} submit failures in {policy.window_s:.0f} s)"
