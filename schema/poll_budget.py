"""The polling budget: at most `polls_per_second` status calls a second to one provider, shared by
every worker process.

One row per provider holds when the next status call may start (`next_at`, on the database's
clock, so workers on hosts whose clocks differ still share one timeline). A call books its turn
with one statement: its turn is `max(next_at, now)`, and `next_at` moves on by the spacing
`turn_spacing_s(rate)`. A call starts within LATE_S of its turn or not at all (its caller books
again, activities/status_calls.py), and reaches the provider up to ARRIVAL_SLACK_S after it starts,
so any one second of arrivals (a whole second, or any other) holds calls whose turns lie within
1 + LATE_S + ARRIVAL_SLACK_S seconds: `rate` of them at the most, as the spacing is that span over
`rate`. The slack costs throughput: a saturated 20/s budget makes 14.3 calls a second. A turn
further away than the caller may wait is not booked (nothing is taken from the budget); the caller
is told how far the budget is booked ahead instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.orm import Session

LATE_S = 0.1  # a status call starts at most this long after its turn, else it books another
# How much later than it left a call may be counted by the provider: the network, the provider's
# intake and a loaded worker's threads bunch calls that left on time. Measured on 2 cores at a load
# average of 16-20: up to 0.26 s past LATE_S (a busiest second of 23 at a budget of 20 when turns
# were spaced by (1 + LATE_S) / rate alone).
ARRIVAL_SLACK_S = 0.3

# The row is made on first use; on conflict the row is locked and read after the lock is taken, so
# two workers never book the same turn. clock_timestamp(), not now(): now() is when the
# transaction began, which under contention for the row can be well before the turn is booked.
_BOOK = text("""
INSERT INTO provider_poll_budgets AS b (provider, next_at)
VALUES (:provider, clock_timestamp() + make_interval(secs => :spacing_s))
ON CONFLICT (provider) DO UPDATE
   SET next_at = greatest(b.next_at, clock_timestamp()) + make_interval(secs => :spacing_s)
 WHERE greatest(b.next_at, clock_timestamp()) <= clock_timestamp() + make_interval(secs => :max_wait_s)
RETURNING extract(epoch FROM b.next_at - clock_timestamp())::float8 - :spacing_s AS wait_s
""")
_AHEAD = text("""
SELECT provider, greatest(extract(epoch FROM next_at - clock_timestamp())::float8, 0) AS ahead_s
  FROM provider_poll_budgets WHERE provider = ANY(:providers)
""")


@dataclass(frozen=True)
class Turn:
    """A booked turn (`wait_s` from now, 0 when it is now), or none (`booked` False) because the
    budget is booked further ahead than the caller may wait (`wait_s`: how far)."""

    booked: bool
    wait_s: float


def turn_spacing_s(polls_per_second: float) -> float:
    """The time between two booked turns: one second, with the lateness a turn may start at and
    arrive with, shared among `polls_per_second` calls."""
    return (1.0 + LATE_S + ARRIVAL_SLACK_S) / polls_per_second


def book_turn(session: Session, provider: str, polls_per_second: float, max_wait_s: float) -> Turn:
    """Book the next status call to `provider` if it can start within `max_wait_s`."""
    spacing_s = turn_spacing_s(polls_per_second)
    wait = session.execute(_BOOK, {"provider": provider, "spacing_s": spacing_s, "max_wait_s": max_wait_s}).scalar()
    if wait is not None:
        return Turn(booked=True, wait_s=max(0.0, wait))
    return Turn(booked=False, wait_s=booked_ahead(session, [provider]).get(provider, max_wait_s))


def booked_ahead(session: Session, providers: list[str]) -> dict[str, float]:
    """How many seconds ahead each provider's budget is booked (0: a status call could start now);
    providers that never had a budgeted call are left out."""
    return {p: ahead for p, ahead in session.execute(_AHEAD, {"providers": providers}).all()}
