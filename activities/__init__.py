"""Activities, one module per concern; `build_activities` wires their dependencies."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def build_activities(settings, client) -> list[Callable[..., Any]]:  # noqa: ANN001 - Settings, Client
    from activities.admission import AdmissionActivities
    from activities.fetch import FetchActivities
    from activities.ledger import LedgerActivities
    from activities.media import MediaActivities
    from activities.poll import PollActivities
    from activities.review import ReviewActivities
    from activities.submit import SubmitActivities
    from activities.tasks import TaskActivities
    from adapters.fetcher import SafeFetcher
    from adapters.providers import build_providers
    from adapters.storage import ObjectStorage
    from schema.db import Database

    db = Database(settings.database_url)
    storage = ObjectStorage.from_settings(settings)
    providers = build_providers(settings)
    fetcher = SafeFetcher.from_settings(settings)
    tasks = TaskActivities(db, storage, providers)
    ledger = LedgerActivities(db)
    submit = SubmitActivities(db, storage, providers, settings.worker_id or "worker",
                              webhook_url=settings.webhook_url)
    poll = PollActivities(db, providers)
    fetch = FetchActivities(db, storage, providers, fetcher)
    media = MediaActivities(db, storage)
    review = ReviewActivities(db, storage)
    admission = AdmissionActivities(client, settings.provider_limits, settings.gate_lease_s)
    return [
        admission.request_slot,
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
        fetch.fetch_output,
        media.transcode,
        review.check_output,
    ]
