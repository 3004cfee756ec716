"""What providers say about a job, from webhooks and status calls, reduced to one view.

Pure and deterministic (used inside GenerationWorkflow): no I/O, no clock. A job's statuses only
move forward (waiting, running, ended), so an observation that arrives late or twice can never
move a task back; webhook signals are coalesced to the newest per job, so a chatty provider costs
the workflow one step however many events it sends.
"""

from __future__ import annotations

from datetime import UTC, datetime

from contracts.messages import ProviderUpdate
from contracts.provider import JobStatus

_RANK = {
    JobStatus.QUEUED: 0,
    JobStatus.THROTTLED: 0,
    JobStatus.RUNNING: 1,
    JobStatus.SUCCEEDED: 2,
    JobStatus.FAILED: 2,
    JobStatus.CANCELED: 2,
    JobStatus.EXPIRED: 2,
}
_NO_TIME = datetime.min.replace(tzinfo=UTC)
SEEN_EVENTS_KEPT = 256  # webhook ids remembered per workflow for dropping exact repeats

# Polling with webhooks on is a safety net: the first status call after this long, then each
# interval twice the last, up to the cap (calls at 60 s, 180 s, 420 s, then every 5 min). A task
# whose webhooks are all lost still ends. Provider jobs take minutes: a first call after 30 s
# growing by 1.5 made four status calls for a 3-minute job whose webhooks all arrived; this
# makes two or three.
SAFETY_NET_FIRST_S = 60.0
SAFETY_NET_GROWTH = 2.0
SAFETY_NET_MAX_S = 300.0
POLL_GROWTH = 1.5  # without webhooks


def rank(status: JobStatus | None) -> int:
    """-1 for a bare hint (no status), then waiting < running < ended."""
    return -1 if status is None else _RANK[status]


def terminal(status: JobStatus | None) -> bool:
    return rank(status) == 2


def needs_status_call(update: ProviderUpdate) -> bool:
    """Only a signed, non-final observation is acted on as it is. An unsigned one is a hint; an
    ending is always confirmed by a status call, which also brings the outputs and the cost."""
    return not update.verified or update.status is None or terminal(update.status)


def worth_a_signal(update: ProviderUpdate) -> bool:
    """Whether the workflow acts on this observation: one to confirm with a status call, or a job
    now running. A signed "still waiting" moves nothing, so it is stored but not signaled: one
    workflow step less per job (providers report a job queued as soon as it is accepted)."""
    return needs_status_call(update) or rank(update.status) >= rank(JobStatus.RUNNING)


def _newer(a: ProviderUpdate, b: ProviderUpdate) -> bool:
    return (rank(a.status), a.observed_at or _NO_TIME) > (rank(b.status), b.observed_at or _NO_TIME)


class Inbox:
    """The newest webhook observation per job, not yet acted on."""

    def __init__(self) -> None:
        self._latest: dict[str, ProviderUpdate] = {}
        self._seen: list[str] = []

    def offer(self, update: ProviderUpdate) -> bool:
        """Keep `update` if it says something newer about its job; False for repeats and stale news."""
        if update.event_id is not None:
            if update.event_id in self._seen:
                return False
            self._seen = [*self._seen[-(SEEN_EVENTS_KEPT - 1):], update.event_id]
        current = self._latest.get(update.job_id)
        if current is not None and not _newer(update, current):
            return False
        self._latest[update.job_id] = update
        return True

    def holds(self, job_id: str) -> bool:
        """Whether an observation of `job_id` waits to be acted on."""
        return job_id in self._latest

    def take(self, job_id: str) -> ProviderUpdate | None:
        return self._latest.pop(job_id, None)


class PollCadence:
    """Seconds until the next status call: right away and then quickly without webhooks (1.5x per
    call up to `max_s`), a safety net with them."""

    def __init__(self, *, webhooks: bool, min_interval_s: float, max_s: float):
        self.webhooks = webhooks
        self._floor = max(min_interval_s, 1.0)
        self._interval = SAFETY_NET_FIRST_S if webhooks else self._floor
        self._growth = SAFETY_NET_GROWTH if webhooks else POLL_GROWTH
        self._max = SAFETY_NET_MAX_S if webhooks else max_s

    def first(self) -> float:
        """The wait before the first status call: none without webhooks (then `next()` spaces them)."""
        return self.next() if self.webhooks else 0.0

    def next(self) -> float:
        """The wait after a status call; each one longer than the last, up to the cap."""
        wait = self._interval
        self._interval = min(self._interval * self._growth, self._max)
        return wait

    @property
    def floor(self) -> float:
        """The provider's minimum spacing between status calls for one job."""
        return self._floor
