"""Status calls to a provider (`GET` of a job), the one way any step asks a provider how a job is:
each waits its turn in the provider's polling budget and is counted by outcome.

Following a job is not the only status call: the fetch step asks for the job's output URL too (and
again when the URL went stale). Both go through `StatusCalls.get_job`, so the budget
(REELQUEUE_PROVIDER_LIMITS `polls_per_second`) caps what the provider receives, not only the polls.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from temporalio import activity

from activities.errors import NOT_YET_CONCLUSIVE, retry_later
from adapters.providers.base import JobState, VideoProvider
from metrics import POLL_BUDGET_LATE, POLL_BUDGET_REFUSED, POLL_BUDGET_WAIT, STATUS_CALLS
from schema.db import Database
from schema.poll_budget import LATE_S, book_turn

# A status call waits for its turn in the provider's polling budget for at most this share of the
# step's start-to-close timeout (5 s of poll_job's 15 s), leaving the rest to the call itself: the
# wait never times the step out. A turn further away is not booked; the step is retried once the
# budget's backlog has passed (its retry delay), and the workflow's own outage pacing takes over
# when those tries run out.
BUDGET_WAIT_SHARE = 1 / 3
HEARTBEAT_EVERY_S = 1.0  # while waiting, when the step has a heartbeat timeout
DEFAULT_STEP_S = 15.0  # the wait's base when the step has no start-to-close timeout


class StatusCalls:
    def __init__(self, db: Database | None, polls_per_second: Mapping[str, float] | None = None):
        """`polls_per_second`: the providers with a polling budget (REELQUEUE_PROVIDER_LIMITS), whose
        turns are booked in `db` (None only without budgets)."""
        self.db = db
        self.polls_per_second = dict(polls_per_second or {})

    def get_job(self, provider: VideoProvider, job_id: str) -> JobState:
        """One status call, once it is its turn in the provider's polling budget."""
        self.wait_turn(provider.name)
        try:
            state = provider.get_job(job_id)
        except Exception:
            STATUS_CALLS.labels(provider.name, "error").inc()
            raise
        STATUS_CALLS.labels(provider.name, "ok").inc()
        return state

    def wait_turn(self, provider: str) -> None:
        """Wait for a status call's turn in `provider`'s polling budget, if it has one (heartbeating
        when the step has a heartbeat timeout). A turn too far away is a retry after the backlog; a
        turn this thread woke for too late (LATE_S: a loaded host) is let go and another booked."""
        rate = self.polls_per_second.get(provider)
        if rate is None:
            return
        info = activity.info()
        step_s = info.start_to_close_timeout.total_seconds() if info.start_to_close_timeout else DEFAULT_STEP_S
        give_up = time.monotonic() + step_s * BUDGET_WAIT_SHARE
        while True:
            with self.db.transaction() as session:
                turn = book_turn(session, provider, rate, max(0.0, give_up - time.monotonic()))
            if not turn.booked:
                POLL_BUDGET_REFUSED.labels(provider).inc()
                raise retry_later(f"{provider}'s polling budget ({rate:g}/s) is booked {turn.wait_s:.1f} s ahead",
                                  NOT_YET_CONCLUSIVE, max(turn.wait_s, 1.0))
            POLL_BUDGET_WAIT.labels(provider).inc(turn.wait_s)
            at = time.monotonic() + turn.wait_s
            while (left := at - time.monotonic()) > 0:
                time.sleep(min(left, HEARTBEAT_EVERY_S))
                if info.heartbeat_timeout:
                    activity.heartbeat()
            if time.monotonic() - at <= LATE_S:
                return
            POLL_BUDGET_LATE.labels(provider).inc()
