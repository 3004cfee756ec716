"""Which task queue a workflow's activity runs on (docs/deploy.md, "Task queues and workers")."""

from __future__ import annotations

from temporalio import workflow

from workflows import api


def queue_of(activity_name: str, patch: str) -> str | None:
    """A media step on the media queue of the workflow's own queue once `patch` applies; anything
    else (and a media step of a run from before the patch) on the workflow's queue (None)."""
    if activity_name in api.MEDIA_ACTIVITIES and workflow.patched(patch):
        return api.media_queue(workflow.info().task_queue)
    return None
