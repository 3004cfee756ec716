"""Error types the workflow reacts to. Business failures are non-retryable ApplicationErrors."""

from __future__ import annotations

from temporalio.exceptions import ApplicationError

INSUFFICIENT_CREDIT = "InsufficientCredit"
NOT_YET_CONCLUSIVE = "NotYetConclusive"
OUTPUT_INVALID = "OutputInvalid"
OUTPUT_UNAVAILABLE = "OutputUnavailable"
FETCH_REFUSED = "FetchRefused"


def business_failure(message: str, error_type: str) -> ApplicationError:
    """A failure that retrying cannot fix: the workflow decides what state it leads to."""
    return ApplicationError(message, type=error_type, non_retryable=True)


def retry_later(message: str, error_type: str, delay_s: float | None = None) -> ApplicationError:
    from datetime import timedelta

    return ApplicationError(
        message, type=error_type, next_retry_delay=timedelta(seconds=delay_s) if delay_s else None
    )
