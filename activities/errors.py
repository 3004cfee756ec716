"""Error types the workflow reacts to, classified in one place at the activity boundary.

A business failure (retrying cannot fix it) leaves an activity as a non-retryable
`ApplicationError` whose `type` is one of `BUSINESS_FAILURES`; the workflow decides what state it
leads to. Everything else is infrastructure trouble and is retried by the step's policy.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import ParamSpec, TypeVar

from sqlalchemy.exc import DBAPIError
from temporalio import activity
from temporalio.exceptions import ApplicationError, CancelledError
from urllib3.exceptions import MaxRetryError, NewConnectionError

from adapters.providers.base import ProviderError
from schema.db import database_unavailable
from schema.task_store import TaskNotFound

P = ParamSpec("P")
R = TypeVar("R")

INSUFFICIENT_CREDIT = "InsufficientCredit"
TASK_NOT_FOUND = "TaskNotFound"
PROVIDER_REFUSED = "ProviderRefused"  # a status/cancel/list call the provider will never answer
OUTPUT_INVALID = "OutputInvalid"
OUTPUT_UNAVAILABLE = "OutputUnavailable"
FETCH_REFUSED = "FetchRefused"
DISPATCH_NOT_CLAIMED = "DispatchNotClaimed"  # a submit for a task whose dispatch the state machine refused
NOT_YET_CONCLUSIVE = "NotYetConclusive"  # retryable: ask again after the hinted delay
WORKER_SHUTDOWN = "WorkerShutdown"  # retryable: the worker drained past its timeout; another one goes on
# retryable: Postgres or object storage did not answer, or refused the write (a table locked, the database
# read-only); the workflow waits for it past the step's budget (degradation-v1, docs/reliability.md)
DEPENDENCY_UNAVAILABLE = "DependencyUnavailable"

BUSINESS_FAILURES: tuple[str, ...] = (
    INSUFFICIENT_CREDIT, TASK_NOT_FOUND, PROVIDER_REFUSED, OUTPUT_INVALID, OUTPUT_UNAVAILABLE, FETCH_REFUSED,
    DISPATCH_NOT_CLAIMED,
)


def business_failure(message: str, error_type: str) -> ApplicationError:
    """A failure that retrying cannot fix: the workflow decides what state it leads to."""
    assert error_type in BUSINESS_FAILURES, error_type
    return ApplicationError(message, type=error_type, non_retryable=True)


def retry_later(message: str, error_type: str, delay_s: float | None = None) -> ApplicationError:
    return ApplicationError(
        message, type=error_type, next_retry_delay=timedelta(seconds=delay_s) if delay_s else None
    )


@contextmanager
def activity_boundary() -> Iterator[None]:
    """Turn our own exceptions into what Temporal should do with them, and log every failure."""
    try:
        yield
    except ApplicationError as exc:
        activity.logger.warning("%s failed: %s: %s", activity.info().activity_type, exc.type, exc.message)
        raise
    except TaskNotFound as exc:
        raise business_failure(f"task {exc} not found", TASK_NOT_FOUND) from exc
    except CancelledError as exc:
        if activity.is_worker_shutdown():  # a failure the step's policy retries, on another worker
            activity.logger.warning("%s cut off by the worker's shutdown", activity.info().activity_type)
            raise ApplicationError("the worker shut down before the step ended", type=WORKER_SHUTDOWN) from exc
        raise
    except DEPENDENCY_ERRORS as exc:
        what = unavailable_dependency(exc)
        if what is None:
            activity.logger.exception("%s failed (will be retried by policy)", activity.info().activity_type)
            raise
        activity.logger.warning("%s: %s", activity.info().activity_type, what, exc_info=exc)
        # No chained cause: the driver's and urllib3's tracebacks made the failure bigger than the
        # server keeps ("Failure exceeds size limit"), and the workflow then lost the error's type.
        raise ApplicationError(what, type=DEPENDENCY_UNAVAILABLE) from None
    except ProviderError as exc:
        activity.logger.warning("%s: provider call failed: %s", activity.info().activity_type, exc)
        if not exc.retryable:
            raise business_failure(str(exc), PROVIDER_REFUSED) from exc
        raise
    except Exception:
        activity.logger.exception("%s failed (will be retried by policy)", activity.info().activity_type)
        raise


def unavailable_dependency(exc: BaseException) -> str | None:
    """What a failure says about Postgres or object storage being out of reach, in one line without
    hosts or SQL; None when it is something else (a bug, a constraint), which stays an ordinary error."""
    if isinstance(exc, DBAPIError):
        return database_unavailable(exc)
    return "object storage is unreachable"  # urllib3 gave up connecting (minio's transport)


DEPENDENCY_ERRORS = (DBAPIError, MaxRetryError, NewConnectionError)


def classified(fn: Callable[P, R]) -> Callable[P, R]:
    """Decorator form of `activity_boundary`, for activity methods (put under `@activity.defn`)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with activity_boundary():
            return fn(*args, **kwargs)

    return wrapper


def classified_async(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """`classified` for `async def` activity methods."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with activity_boundary():
            return await fn(*args, **kwargs)

    return wrapper
