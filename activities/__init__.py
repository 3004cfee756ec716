"""Activities, one module per concern; `build_activities` wires their dependencies."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# validate_task has 30 s per try; an image resolve makes up to 3 tries of this many seconds.
VALIDATION_IMAGE_TIMEOUT_S = 8.0
# Every activity statement gives up waiting for a lock after LOCK_TIMEOUT_S and running after
# STATEMENT_TIMEOUT_S (under the 30 s of the database steps): a locked table (the ledger during a
# migration) fails the try, which is retried, instead of hanging a worker thread (docs/reliability.md).
LOCK_TIMEOUT_S = 5.0
STATEMENT_TIMEOUT_S = 20.0


def build_activities(settings, client) -> list[Callable[..., Any]]:  # noqa: ANN001 - Settings, Client
    from activities.admission import AdmissionActivities, GateNotices
    from activities.fetch import FetchActivities
    from activities.ledger import LedgerActivities
    from activities.media import MediaActivities
    from activities.media_step import MediaStepActivities
    from activities.poll import PollActivities
    from activities.prepare import PrepareActivities
    from activities.review import ReviewActivities
    from activities.routing import RoutingActivities
    from activities.status_calls import StatusCalls
    from activities.submit import SubmitActivities
    from activities.tasks import TaskActivities
    from adapters.fetcher import SafeFetcher
    from adapters.media.ffmpeg_tools import MediaLimits
    from adapters.providers import build_providers
    from adapters.providers.base import JobLister
    from adapters.storage import ObjectStorage
    from catalog.images import image_fetcher
    from schema.db import Database, session_options

    db = Database(settings.database_url,
                  session_options(lock_timeout_s=LOCK_TIMEOUT_S, statement_timeout_s=STATEMENT_TIMEOUT_S))
    storage = ObjectStorage.from_settings(settings)
    providers = build_providers(settings)
    fetcher = SafeFetcher.from_settings(settings)
    tasks = TaskActivities(db, storage, providers, image_fetcher(settings, timeout_s=VALIDATION_IMAGE_TIMEOUT_S),
                           settings.admission_layers())
    ledger = LedgerActivities(db, [name for name, p in providers.items() if not isinstance(p, JobLister)])
    submit = SubmitActivities(db, storage, providers, settings.worker_id or "worker",
                              webhook_url=settings.webhook_url, gate=GateNotices.on_running_loop(client),
                              inside=settings.emulated)
    status_calls = StatusCalls(db, {name: limits.polls_per_second for name, limits in
                                    settings.provider_limits.items() if limits.polls_per_second})
    poll = PollActivities(db, providers, status_calls, gate=GateNotices.on_running_loop(client))
    fetch = FetchActivities(db, storage, providers, fetcher, url_refreshes=settings.fetch_url_refreshes,
                            expiry_margin_s=settings.fetch_expiry_margin_s, status_calls=status_calls)
    media = MediaActivities(
        db, storage,
        limits=MediaLimits(threads=settings.media_threads, nice=settings.media_nice,
                           max_memory_mb=settings.media_max_memory_mb),
        max_input_pixels=settings.media_max_input_pixels, max_input_duration_s=settings.media_max_input_duration_s,
    )
    review = ReviewActivities(db, storage)
    admission = AdmissionActivities(client, settings.provider_limits, settings.gate_lease_s, settings.provider_breaker)
    routing = RoutingActivities(db, client, providers, tasks.plan, settings.admission_layers())
    return [
        routing.choose_route,
        admission.request_slot,
        PrepareActivities(tasks, ledger).prepare_task,
        tasks.validate_task,
        tasks.record_transition,
        ledger.reserve_credit,
        ledger.settle,
        submit.submit,
        submit.reconcile_submit,
        submit.abandon_attempt,
        poll.poll_job,
        poll.cancel_job,
        poll.account_stray_job,
        poll.unaccounted_strays,
        poll.accept_stray_cost,
        fetch.fetch_output,
        media.transcode,
        media.transcode_proxy,
        media.make_renditions,
        review.check_output,
        MediaStepActivities(media, review, ledger).make_media,
    ]
