"""POST /webhooks/{provider}: provider webhooks into the inbox, then to the task's workflow.

Order of work, each step only if the previous passed: the provider must have a receiver (404),
the body at most `max_body_bytes` (413), the adapter verifies the raw body (401 forged or stale,
400 unusable), the event is stored once per delivery id (one short transaction), then, with the
transaction closed, the task's workflow is signaled (unless the event is a signed "still waiting",
which moves nothing: `worth_a_signal`). Answers are quick: nothing is fetched here.

A signed "running" of a run that opted in (schema/quiet_progress.py) is not signaled: in the
transaction that stores it, the task row is moved SUBMITTED -> RUNNING through the state machine
(or left as it is when the task is further along). Endings, unsigned hints and runs from before
are signaled as above.

A success whose workflow has closed, for a task that ended CANCELED, is judged as the provider
backstop judges a listed job (control/provider_backstop.py): the output is recorded and booked in
this request.

A stored event whose signal could not go out (Temporal unavailable) answers 503, so the provider
delivers it again; that delivery finds the row and sends the signal then, with the same request
id (gateway/signals.py). Logs name provider, delivery id and state; never bodies or signatures.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from adapters.providers.base import WebhookReceiver, WebhookRejected
from contracts.messages import ProviderUpdate
from contracts.provider import JobStatus, WebhookEvent
from control.provider_backstop import Finding, Verdict, record_late_success
from gateway.deps import GatewayDeps, gateway_deps
from gateway.guards import read_body
from gateway.problems import ProblemError
from gateway.signals import SignalUnavailable, signal_request_id
from metrics import WEBHOOK_LAG, WEBHOOKS
from schema import webhook_inbox as inbox
from schema.quiet_progress import Quiet, record_running
from workflows.observations import worth_a_signal

log = logging.getLogger("gateway.webhooks")
router = APIRouter()
RETRY_AFTER = {"Retry-After": "5"}
SWEEP_EVERY_S = 60.0  # orphan expiry runs at most this often per gateway process


@router.post("/webhooks/{provider}")
async def receive_webhook(provider: str, request: Request, deps: GatewayDeps = Depends(gateway_deps)) -> dict:
    receiver = deps.providers.get(provider)
    if not isinstance(receiver, WebhookReceiver):
        raise ProblemError(404, "no webhooks are received for this provider", slug="unknown-provider")
    body = await read_body(request, deps.max_body_bytes, what="webhook bodies", slug="webhook-too-large")
    try:
        event = receiver.parse_webhook(request.headers, body)
    except WebhookRejected as exc:
        log.info("webhook for %s refused: %s", provider, exc.reason)
        WEBHOOKS.labels(provider, "refused").inc()
        if exc.malformed:
            raise ProblemError(400, exc.reason, slug="malformed-webhook") from None
        raise ProblemError(401, exc.reason, slug="webhook-not-verified") from None
    update = inbox.to_update(event)
    receipt, quiet = await _store(deps, provider, event, update, body)
    log.info("webhook %s %s: %s%s%s", provider, event.event_id, receipt.state.value,
             " (duplicate)" if receipt.duplicate else "", "" if quiet is Quiet.SIGNAL else f" ({quiet.value}, quiet)")
    WEBHOOKS.labels(provider, "duplicate" if receipt.duplicate else receipt.state.value).inc()
    signal = receipt.workflow_id is not None and worth_a_signal(update) and quiet is Quiet.SIGNAL
    if signal and not await _signal(deps, provider, event, update, receipt.row_id, receipt.workflow_id):
        await _record_late_success(deps, provider, event)
    await _sweep(deps)
    return {"ok": True}


def _record(deps: GatewayDeps, provider: str, event: WebhookEvent, update: ProviderUpdate,
            body: bytes) -> tuple[inbox.Receipt, Quiet]:
    """The event stored and, for a run that opted in, its signed running recorded on the task: one
    short transaction, so the row never moves for an event that was not kept."""
    with deps.db.transaction() as session:
        receipt = inbox.record_event(session, provider, event, body)
        return receipt, record_running(session, provider, receipt, update)


async def _store(deps: GatewayDeps, provider: str, event: WebhookEvent, update: ProviderUpdate,
                 body: bytes) -> tuple[inbox.Receipt, Quiet]:
    try:
        return await run_in_threadpool(_record, deps, provider, event, update, body)
    except Exception as exc:  # the class only: a database error's text carries the row (the body)
        log.error("webhook %s %s not stored: %s", provider, event.event_id, type(exc).__name__)
        WEBHOOKS.labels(provider, "unavailable").inc()
        raise ProblemError(503, "the event could not be stored; deliver it again later", slug="webhook-not-stored",
                           headers=RETRY_AFTER) from None


def _mark_signaled(deps: GatewayDeps, row_id: int) -> None:
    with deps.db.transaction() as session:
        inbox.mark_signaled(session, row_id)


async def _signal(deps: GatewayDeps, provider: str, event: WebhookEvent, update: ProviderUpdate, row_id: int,
                  workflow_id: str) -> bool:
    """Signal the task's workflow (outside any transaction); False if it is closed or missing."""
    try:
        delivered = await deps.signaler.signal(workflow_id, update,
                                               signal_request_id(provider, event.event_id))
    except SignalUnavailable as exc:
        log.warning("webhook %s %s stored, not signaled: %s", provider, event.event_id, exc)
        WEBHOOKS.labels(provider, "unavailable").inc()
        raise ProblemError(503, "the event is stored; deliver it again later", slug="webhook-not-delivered",
                           headers=RETRY_AFTER) from None
    if not delivered:
        log.info("webhook %s %s: workflow %s is closed or unknown", provider, event.event_id, workflow_id)
        return False
    if event.observed_at is not None:  # the provider's clock; a naive time is taken as UTC
        observed = event.observed_at if event.observed_at.tzinfo else event.observed_at.replace(tzinfo=UTC)
        WEBHOOK_LAG.labels(provider).observe(max(0.0, (datetime.now(UTC) - observed).total_seconds()))
    try:
        await run_in_threadpool(_mark_signaled, deps, row_id)
    except Exception as exc:  # noqa: BLE001 - delivered: a redelivery would signal again, deduplicated
        log.warning("webhook %s %s signaled, not marked: %s", provider, event.event_id, type(exc).__name__)
    return True


def _late(deps: GatewayDeps, provider: str, event: WebhookEvent) -> Finding | None:
    with deps.db.transaction() as session:
        return record_late_success(session, provider, event)


async def _record_late_success(deps: GatewayDeps, provider: str, event: WebhookEvent) -> None:
    """A success whose workflow has closed: an output after CANCELED is flagged and booked now, as
    the provider backstop would (from the webhook's own body, nothing fetched). Not recorded (the
    database down): 503, and the provider's redelivery tries again."""
    if event.status is not JobStatus.SUCCEEDED:
        return
    try:
        finding = await run_in_threadpool(_late, deps, provider, event)
    except Exception as exc:  # the class only, as for storing
        log.error("webhook %s %s: late success not recorded: %s", provider, event.event_id, type(exc).__name__)
        WEBHOOKS.labels(provider, "unavailable").inc()
        raise ProblemError(503, "the event is stored; deliver it again later", slug="late-output-not-recorded",
                           headers=RETRY_AFTER) from None
    if finding is not None and finding.verdict is Verdict.OUTPUT_AFTER_CANCEL:
        log.warning("webhook %s %s: output after CANCELED of task %s: %s", provider, event.event_id,
                    finding.task_id, finding.detail or "already booked")


def _expire(deps: GatewayDeps) -> int:
    with deps.db.transaction() as session:
        return inbox.expire_orphans(session, deps.orphan_ttl_s)


async def _sweep(deps: GatewayDeps) -> None:
    """Now and then, mark orphans past the TTL expired (best effort: counts treat them so anyway)."""
    now = time.monotonic()
    if now < deps.next_sweep:
        return
    deps.next_sweep = now + SWEEP_EVERY_S
    try:
        expired = await run_in_threadpool(_expire, deps)
    except Exception as exc:  # noqa: BLE001 - a failed sweep must not fail a stored delivery
        log.warning("orphan sweep failed: %s", type(exc).__name__)
        return
    if expired:
        log.info("%d webhook orphans expired", expired)
