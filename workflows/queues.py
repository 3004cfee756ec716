"""Which task queue a workflow's activity runs on (docs/deploy.md, "Task queues and workers"), and
with which priority on it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import Priority

from contracts import workflow_api as api


def queue_of(activity_name: str, patch: str, patched: Callable[[str], bool] = workflow.patched) -> str | None:
    """A media step on the media queue of the workflow's own queue once `patch` applies (asked of
    `patched`); anything else (and a media step of a run from before the patch) on the workflow's queue (None)."""
    if activity_name in api.MEDIA_ACTIVITIES and patched(patch):
        return api.media_queue(workflow.info().task_queue)
    return None


# Priority keys of an output's fetch by the time its provider URL has left (lower is dispatched first;
# an unset key counts as 3): when storage comes back after an outage, the fetches that wait for it
# start with the URLs closest to expiring (docs/reliability.md, "Degradation").
FETCH_PRIORITIES: tuple[tuple[timedelta, int], ...] = ((timedelta(minutes=15), 1), (timedelta(hours=1), 2))


def fetch_priority(expires_at: datetime | None, now: datetime) -> Priority:
    """The priority of fetching an output whose URL expires at `expires_at` (None: unknown, default)."""
    if expires_at is None:
        return Priority.default
    for within, key in FETCH_PRIORITIES:
        if expires_at - now < within:
            return Priority(priority_key=key)
    return Priority.default
