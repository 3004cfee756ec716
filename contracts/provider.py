"""The provider vocabulary every layer shares: a submit's outcome, a job's status, an error's class,
and a webhook as an adapter normalized it (the gateway stores it, the submit step matches it).

Adapters (adapters/providers/base.py) produce these; the workflow, the activities and the ledger
read them, so they import nothing of ours.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field


class SubmitOutcome(StrEnum):
    ACCEPTED = "accepted"  # the provider returned a job id
    REJECTED_RETRYABLE = "rejected_retryable"  # refused before accepting (429, 5xx with no job, connect error)
    REJECTED_FINAL = "rejected_final"  # validation, moderation, auth: do not resubmit
    UNKNOWN = "unknown"  # sent, no answer: reconcile before any resubmit


class ErrorClass(StrEnum):
    RETRYABLE = "retryable"
    NON_RETRYABLE = "non_retryable"
    MODERATION = "moderation"
    UNKNOWN_OUTCOME = "unknown_outcome"


class JobStatus(StrEnum):
    QUEUED = "queued"
    THROTTLED = "throttled"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"
    EXPIRED = "expired"


# A job in one of these has ended at the provider (PollResult.terminal).
TERMINAL_JOB_STATUSES = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELED, JobStatus.EXPIRED})


class WebhookEvent(BaseModel):
    """One provider webhook, verified and normalized by its adapter; the gateway stores it and
    turns it into the workflow's ProviderUpdate."""

    event_id: str = Field(min_length=1, max_length=300)  # the delivery id: the same event twice is one event
    job_id: str = Field(min_length=1, max_length=256)
    request_key: str | None = Field(default=None, max_length=300)  # ours, when the provider echoes it
    status: JobStatus | None = None
    raw_status: str | None = None
    progress: float | None = None
    observed_at: datetime | None = None  # the provider's time of the change
    verified: bool = False
    headers: dict[str, str] = Field(default_factory=dict)  # delivery headers worth keeping; never a signature
    # What a success's body says, when the provider's webhook carries it (kept for an output that
    # arrives after its task ended: control/provider_backstop.py books it without a provider call).
    cost: float | None = Field(default=None, ge=0)
    outputs: list[str] = Field(default_factory=list, max_length=16)
