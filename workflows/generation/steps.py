"""The step table (every activity's timeout and retry budget in one place) and the timings the
workflow waits by; what happens when a budget runs out is the parts' decision."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.admission import AdmissionActivities
    from activities.errors import BUSINESS_FAILURES
    from activities.fetch import FetchActivities
    from activities.ledger import LedgerActivities
    from activities.media import MediaActivities
    from activities.media_step import MediaStepActivities
    from activities.poll import PollActivities
    from activities.prepare import PrepareActivities
    from activities.review import ReviewActivities
    from activities.routing import RoutingActivities
    from activities.submit import SubmitActivities
    from activities.tasks import TaskActivities
    from contracts.messages import ResolveRequest

MAX_PAID_ATTEMPTS = 3  # submits that created (or may have created) a provider job
DEPENDENCY_PAUSE_S = 30.0  # between runs of a step waiting for Postgres or object storage to come back
REASK_EVERY = timedelta(minutes=10)  # a waiting task re-sends its request (same place in line) this often
REROUTE_EVERY = timedelta(minutes=1)  # a task with fallback routes waiting in a gate's line re-chooses this often
# long-wait-spacing-v1: once a task has waited LONG_WAIT for a slot, it wakes less often (its looks and re-asks
# are what grows its history; a task that waited an hour notices a healed route or a restarted gate in minutes)
LONG_WAIT = timedelta(hours=1)
LONG_LOOK_EVERY = timedelta(minutes=20)
LONG_REASK_EVERY = timedelta(minutes=30)
RENEW_EVERY = timedelta(minutes=5)  # a held slot's lease is renewed this often while its job runs
MAX_POLL_INTERVAL_S = 15.0
OUTAGE_PAUSE_S = 30.0  # between status-call bursts while the provider's status API is down
RETRY_BACKOFF_S = (5.0, 20.0, 60.0)
STOP_GRACE = timedelta(minutes=10)  # after a cancel call, how long the job may take to end
def retry_policy(attempts: int | None, *, first_s: float = 1.0, max_s: float = 30.0) -> RetryPolicy:
    """Exponential backoff capped at `max_s`; `attempts` None = until the step succeeds.
    Business failures (activities/errors.py) are never retried."""
    return RetryPolicy(initial_interval=timedelta(seconds=first_s), maximum_interval=timedelta(seconds=max_s),
                       maximum_attempts=attempts or 0, non_retryable_error_types=list(BUSINESS_FAILURES))
# One row per activity: (start_to_close, retry policy, heartbeat timeout). Budgets are for
# infrastructure trouble; what happens when one runs out is the workflow's decision below.
STEPS: dict[Callable[..., Any], tuple[timedelta, RetryPolicy, timedelta | None]] = {
    TaskActivities.validate_task: (timedelta(seconds=30), retry_policy(20), None),
    PrepareActivities.prepare_task: (timedelta(seconds=30), retry_policy(20), None),
    LedgerActivities.reserve_credit: (timedelta(seconds=30), retry_policy(20), None),
    # A re-run of submit never sends twice (the attempt row says SENDING -> unknown outcome).
    SubmitActivities.submit: (timedelta(seconds=40), retry_policy(20), None),
    # About 15 minutes, NotYetConclusive retries included; then a person decides.
    SubmitActivities.reconcile_submit: (timedelta(seconds=30), retry_policy(40, first_s=2.0), None),
    SubmitActivities.abandon_attempt: (timedelta(seconds=30), retry_policy(None), None),
    AdmissionActivities.request_slot: (timedelta(seconds=30), retry_policy(None), None),
    # Reads gates and the ledger; a task waits here only while Postgres or Temporal is out of reach
    RoutingActivities.choose_route: (timedelta(seconds=30), retry_policy(None), None),
    # A short burst: the workflow itself rides out longer status outages until the deadline.
    PollActivities.poll_job: (timedelta(seconds=15), retry_policy(5, max_s=10.0), None),
    # About 18 minutes of provider trouble; then a person decides (the reservation stays held).
    PollActivities.cancel_job: (timedelta(seconds=15), retry_policy(40, first_s=2.0), None),
    PollActivities.account_stray_job: (timedelta(seconds=30), retry_policy(None, first_s=5.0, max_s=300.0), None),
    PollActivities.accept_stray_cost: (timedelta(seconds=30), retry_policy(None), None),
    FetchActivities.fetch_output: (timedelta(minutes=10), retry_policy(8), timedelta(seconds=30)),
    MediaActivities.transcode: (timedelta(minutes=15), retry_policy(6), timedelta(seconds=60)),
    # ffmpeg's progress heartbeats every ~0.5 s; its own budget scales with duration and resolution
    # (adapters/media/transcode.py), this bound is only the outer one.
    MediaActivities.transcode_proxy: (timedelta(minutes=30), retry_policy(6, first_s=2.0), timedelta(seconds=30)),
    MediaActivities.make_renditions: (timedelta(minutes=20), retry_policy(4, first_s=2.0), timedelta(seconds=30)),
    ReviewActivities.check_output: (timedelta(minutes=5), retry_policy(6), timedelta(seconds=60)),
    # the proxy's budget and the checks' heartbeat timeout (a decode of the whole proxy beats once)
    MediaStepActivities.make_media: (timedelta(minutes=30), retry_policy(6, first_s=2.0), timedelta(seconds=60)),
    LedgerActivities.settle: (timedelta(seconds=30), retry_policy(None), None),
}


# Steps that only write Postgres in one short transaction, run as local activities (local-db-steps-v1) on the
# workflow's worker: their retries are the step table's, re-run by the SDK within the workflow task while
# short (past a minute, after a timer). validate_task stays an activity: it may fetch an input image.
LOCAL_STEPS = frozenset({LedgerActivities.reserve_credit, LedgerActivities.settle})
# A local step's retry waits up to this long inside the workflow task (the first retry of a blip); a longer
# backoff is a durable timer, recorded with the failed try (a marker: `describe` shows no pending activity
# for a local step), so a database out for minutes holds no worker slot and its failures are on record
LOCAL_RETRY_THRESHOLD = timedelta(seconds=1)


def summary(step: Callable[..., Any], arg: Any) -> str:
    """The line the Web UI shows for an activity call: the step, and the attempt and job it is about."""
    parts = [step.__name__]
    for field, label in (("attempt_no", "attempt"), ("job_id", "job")):
        value = getattr(arg, field, None)
        if value:
            parts.append(f"{label} {value}")
    return " · ".join(parts)


def decision_payload(decision: ResolveRequest) -> dict:
    """A person's decision as a state event's payload: what, who and why."""
    return {"decision": decision.action.value, "by": decision.by, "reason": decision.reason}


def error_type(exc: ActivityError) -> str | None:
    return exc.cause.type if isinstance(exc.cause, ApplicationError) else None


def describe(exc: ActivityError) -> str:
    cause = exc.cause
    if isinstance(cause, ApplicationError):
        return f"{cause.type or 'error'}: {cause.message}"
    return str(cause or exc)
