"""A worker interceptor that times every activity, counts those in flight and logs one line for each.

Temporal runs interceptors on the event loop around each activity (sync ones included: they await
the executor), so one place measures transcode and fetch time, errors and media utilisation, and
writes the activity's log line (its ids come from telemetry/logs.py), without touching the activities.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Any

from temporalio import activity
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from contracts.workflow_api import MEDIA_ACTIVITIES
from metrics import ACTIVITIES_IN_FLIGHT, ACTIVITY_SECONDS, ACTIVITY_SLOTS, MEDIA_UTILISATION
from telemetry.logs import bound

log = logging.getLogger("reelqueue.activity")


class ActivityMetrics(Interceptor):
    """One per worker process, on each of its Workers: `slots` is their max_concurrent_activities
    together, `media_slots` the media queue's, the denominator of media utilisation (0: no media
    queue here, utilisation stays 0)."""

    def __init__(self, slots: int, media_slots: int):
        self.slots, self.media_slots = slots, media_slots
        self.busy: Counter[str] = Counter()
        ACTIVITY_SLOTS.set(slots)
        MEDIA_UTILISATION.set_function(self.media_utilisation)

    def media_utilisation(self) -> float:
        busy = sum(self.busy[name] for name in MEDIA_ACTIVITIES)
        return min(1.0, busy / self.media_slots) if self.media_slots else 0.0

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:  # noqa: A002
        return _Timed(next, self)


class _Timed(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, owner: ActivityMetrics):  # noqa: A002
        super().__init__(next)
        self._owner = owner

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:  # noqa: A002
        name = activity.info().activity_type
        self._owner.busy[name] += 1
        ACTIVITIES_IN_FLIGHT.labels(name).inc()
        started, result = time.perf_counter(), "error"
        with bound():  # fields the activity binds (its provider) reach its closing line
            try:
                out = await super().execute_activity(input)
                result = "ok"
                return out
            finally:
                self._owner.busy[name] -= 1
                ACTIVITIES_IN_FLIGHT.labels(name).dec()
                seconds = time.perf_counter() - started
                ACTIVITY_SECONDS.labels(name, result).observe(seconds)
                log.info("activity %s %s in %.3fs", name, result, seconds,
                         extra={"fields": {"result": result, "seconds": round(seconds, 4)}})
