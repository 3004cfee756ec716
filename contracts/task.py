"""A task's statuses and the events that move it: the vocabulary of the state machine
(schema/state_machine.py holds its table), shared by the workflow's messages, the ledger, the
gateway and the CLI."""

from __future__ import annotations

from decimal import Decimal
from enum import StrEnum


class TaskStatus(StrEnum):
    CREATED = "CREATED"
    VALIDATING = "VALIDATING"
    INVALID = "INVALID"
    QUOTA_RESERVED = "QUOTA_RESERVED"
    QUEUED = "QUEUED"
    DISPATCHING = "DISPATCHING"
    SUBMITTED = "SUBMITTED"
    SUBMIT_UNKNOWN = "SUBMIT_UNKNOWN"
    RUNNING = "RUNNING"
    RETRY_WAIT = "RETRY_WAIT"
    OUTPUT_FETCHING = "OUTPUT_FETCHING"
    POST_PROCESSING = "POST_PROCESSING"
    REVIEW = "REVIEW"
    CANCEL_REQUESTED = "CANCEL_REQUESTED"
    NEEDS_ATTENTION = "NEEDS_ATTENTION"
    SUCCEEDED = "SUCCEEDED"
    CANCELED = "CANCELED"
    REJECTED = "REJECTED"
    FAILED_FINAL = "FAILED_FINAL"
    EXPIRED = "EXPIRED"


class TaskEvent(StrEnum):
    VALIDATION_STARTED = "validation_started"
    VALIDATION_PASSED = "validation_passed"
    VALIDATION_FAILED = "validation_failed"
    REVALIDATE = "revalidate"
    QUEUED = "queued"
    DISPATCH_CLAIMED = "dispatch_claimed"
    PROVIDER_ACCEPTED = "provider_accepted"
    SUBMIT_AMBIGUOUS = "submit_ambiguous"
    PROVIDER_JOB_FOUND = "provider_job_found"
    CONFIRMED_NOT_CREATED = "confirmed_not_created"
    PROVIDER_RUNNING = "provider_running"
    PROVIDER_SUCCEEDED = "provider_succeeded"
    OUTPUT_PERSISTED = "output_persisted"
    PLAYABLE_ASSET_READY = "playable_asset_ready"
    REVIEW_REQUIRED = "review_required"
    REVIEW_APPROVED = "review_approved"
    REVIEW_REJECTED = "review_rejected"
    REVIEW_REGENERATE = "review_regenerate"  # a reviewer asked for a new attempt (maybe with an edited prompt)
    # A template without review: its paid video failed an automatic check, and one new attempt is made
    CHECKS_FAILED = "checks_failed"
    RETRYABLE_FAILURE = "retryable_failure"
    RETRY_DUE = "retry_due"
    CANCEL_REQUESTED = "cancel_requested"
    CANCEL_CONFIRMED = "cancel_confirmed"
    COMPLETION_WON = "completion_won"
    NEEDS_ATTENTION = "needs_attention"
    ATTENTION_RESOLVED = "attention_resolved"
    FINAL_FAILURE = "final_failure"
    DEADLINE_PASSED = "deadline_passed"
    REDRIVE = "redrive"  # `reelqueue retry`: a new run of a task that ended without a video
    # A person decided on duplicate jobs that held up the end of a paid video not yet in review:
    # back to POST_PROCESSING (guarded: never for an unpaid task, never out of REVIEW).
    STRAYS_DECIDED = "strays_decided"
    # Audit only, never in the table (so never moves a task): a final object key already held other
    # bytes; the stored object was kept and the new bytes set aside (adapters/storage.py).
    STORAGE_CONFLICT = "storage_conflict"
    # Audit only, never in the table: the task was written (the API's create, with its RESERVE).
    CREATED = "created"


def rounds_to_nothing(duration_s: float | Decimal) -> bool:
    """A video's duration is kept to the millisecond (the task, its reservation and a request's hash
    see one value): one that rounds to 0 ms asks for no video. The API's and the plan's rule."""
    return round(duration_s, 3) <= 0
