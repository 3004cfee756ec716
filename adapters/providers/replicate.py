"""Replicate's HTTP API v1 (api.replicate.com/v1): predictions on official video models.

Checked against the official `replicate` Python client (predictions, pagination, webhook
validation, its recorded cassettes). httpx rather than that client: it offers no switch between
"not sent" and "sent, no answer" on a create, and its `wait` mode (`Prefer: wait`) would hold our
submit call open for the whole render; we create asynchronously and follow the prediction.

- submit: `POST /v1/models/{owner}/{name}/predictions` `{input, webhook, webhook_events_filter}`
  without `Prefer: wait` (asynchronous). Input: `prompt`, the image as `start_image`, `duration`
  (5 or 10), `aspect_ratio`, and a `seed` derived from our request key. Replicate has no
  idempotency key, so that seed is how a prediction is found again.
- status: `starting processing succeeded failed canceled aborted`; an error mentioning E005 /
  "flagged as sensitive" is moderation, other failures are retryable.
- errors: RFC 7807 bodies `{title, detail, status}`; 429 carries `retry-after` (seconds).
- reconcile: list `GET /v1/predictions` (cursor pages, newest first) back over a time window and
  match model and seed.
- cancel: `POST /v1/predictions/{id}/cancel`. A `canceled` prediction (it had started) is billed;
  an `aborted` one (it never started) is not; a failed one is not (official models bill output).
- cost: official video models bill per second of output: the price table (USD-credits per
  second), for succeeded and canceled predictions.
- outputs: `output` URL(s) on replicate.delivery, removed after 1 hour: fetched at once.
- webhooks: Standard Webhooks signatures (`webhook-id`, `webhook-timestamp`, `webhook-signature`)
  with the account's secret from `GET /v1/webhooks/default/secret`
  (REELQUEUE_REPLICATE_WEBHOOK_SECRET); offered only when that secret is configured.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

from pydantic import BaseModel, ConfigDict, ValidationError

from adapters.providers.base import (
    Capabilities,
    GenerationRequest,
    JobState,
    OutputRef,
    ProviderError,
    SubmitResult,
    WebhookRejected,
)
from adapters.providers.http import HttpProvider, ProviderConfig, request_seed
from adapters.webhooks import StandardWebhookVerifier, verified
from contracts.provider import ErrorClass, JobStatus, WebhookEvent

API_VERSION = "v1"
ReplicateStatus = Literal["starting", "processing", "succeeded", "failed", "canceled", "aborted"]
STATUS = {
    "starting": JobStatus.QUEUED, "processing": JobStatus.RUNNING, "succeeded": JobStatus.SUCCEEDED,
    "failed": JobStatus.FAILED, "canceled": JobStatus.CANCELED, "aborted": JobStatus.CANCELED,
}
OUTPUT_TTL = timedelta(hours=1)
LOOKBACK = timedelta(hours=6)  # how far back reconcile lists predictions
MAX_PAGES = 50
_MODERATION_MARKS = ("E005", "flagged as sensitive", "NSFW")


class Prediction(BaseModel):
    """A prediction as GET /v1/predictions/{id} returns it (the fields we read)."""

    model_config = ConfigDict(extra="ignore")

    id: str
    model: str | None = None
    status: ReplicateStatus
    input: dict[str, Any] = {}
    output: str | list[str] | None = None
    error: str | None = None
    created_at: datetime
    started_at: datetime | None = None
    completed_at: datetime | None = None
    metrics: dict[str, Any] | None = None


def error_class(error: str | None) -> ErrorClass:
    if error and any(mark in error for mark in _MODERATION_MARKS):
        return ErrorClass.MODERATION
    return ErrorClass.RETRYABLE


class ReplicateProvider(HttpProvider):
    name = "replicate"
    api_version = API_VERSION
    default_base_url = "https://api.replicate.com"
    emulator_prefix = "replicate"
    # Replicate's published per-second prices for these official models (USD).
    default_prices = {"kwaivgi/kling-v2.1": 0.05, "kwaivgi/kling-v2.1-master": 0.28}
    cancel_semantics = ("POST /v1/predictions/{id}/cancel: canceled (had started) is billed, "
                        "aborted (never started) is not")
    check_path = "/v1/account"
    base_capabilities = Capabilities(
        webhooks=False, cancel=True, reconcile_by_request_key=False, reconcile_by_list=True,
        aspect_ratios=["9:16", "16:9", "1:1"], min_duration_s=5, max_duration_s=10, durations_s=[5.0, 10.0],
        min_poll_interval_s=2.0, output_domains=["replicate.delivery"], output_ttl_s=OUTPUT_TTL.total_seconds(),
        acceptance_window_s=60.0,
    )

    def __init__(self, config: ProviderConfig):
        super().__init__(config)
        secret = config.webhook_secret.get_secret_value()
        self._verifier = StandardWebhookVerifier(secret) if secret else None
        self.capabilities = self.capabilities.model_copy(update={"webhooks": self._verifier is not None})

    def submit(self, request: GenerationRequest) -> SubmitResult:
        body: dict[str, Any] = {"input": {
            "prompt": request.prompt, "duration": int(request.duration_s), "aspect_ratio": request.aspect_ratio,
            "seed": request_seed(request.request_key),
            **({"start_image": request.image_url} if request.image_url else {}),
        }}
        if request.webhook_url:
            body |= {"webhook": request.webhook_url, "webhook_events_filter": ["start", "completed"]}
        sent = self._send_submit(request.request_key, "POST", f"/v1/models/{request.model}/predictions", json=body)
        return sent if isinstance(sent, SubmitResult) else self._submit_answer(request.request_key, sent)

    def get_job(self, job_id: str) -> JobState:
        return self._state(self._prediction(self._call("GET", f"/v1/predictions/{job_id}")))

    def cancel(self, job_id: str) -> JobState:
        return self._state(self._prediction(self._call("POST", f"/v1/predictions/{job_id}/cancel")))

    def find_by_request_key(self, request_key: str) -> list[JobState]:
        """Predictions created within LOOKBACK whose seed is the one derived from `request_key`."""
        seed, since = request_seed(request_key), datetime.now(UTC) - LOOKBACK
        found: list[Prediction] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = self._call("GET", "/v1/predictions", params={"cursor": cursor} if cursor else None)
            results = [self._prediction(p) for p in page.get("results", [])]
            found += [p for p in results if p.input.get("seed") == seed and p.created_at >= since]
            # Only the cursor is taken from `next`: our key never goes to a host the answer names.
            cursor = parse_qs(urlsplit(page.get("next") or "").query).get("cursor", [None])[0]
            if not cursor or not results or min(p.created_at for p in results) < since:
                break
        return [self._state(p, request_key) for p in sorted(found, key=lambda p: p.created_at)]

    def billed(self, state: JobState) -> bool:
        return state.raw_status in ("succeeded", "canceled")

    def parse_webhook(self, headers: Mapping[str, str], body: bytes) -> WebhookEvent:
        """A Standard Webhooks delivery whose body is the prediction."""
        delivery = verified(self._verifier, headers, body)
        try:
            prediction = Prediction.model_validate_json(body)
            return WebhookEvent(
                event_id=delivery.msg_id, job_id=prediction.id, status=STATUS[prediction.status],
                raw_status=prediction.status, observed_at=prediction.completed_at or prediction.started_at
                or prediction.created_at, verified=True, headers=delivery.headers)
        except ValidationError:
            raise WebhookRejected("the body is not a Replicate prediction", malformed=True) from None

    def _prediction(self, body: Any) -> Prediction:
        try:
            return Prediction.model_validate(body)
        except ValidationError as exc:
            raise ProviderError(f"unexpected replicate prediction: {exc.errors()[:2]}", retryable=False) from exc

    def _state(self, p: Prediction, request_key: str | None = None) -> JobState:
        outputs = [p.output] if isinstance(p.output, str) else list(p.output or [])
        expires = (p.completed_at + OUTPUT_TTL) if p.completed_at else None
        failed = p.status == "failed"
        return JobState(
            provider=self.name, job_id=p.id, request_key=request_key, status=STATUS[p.status], raw_status=p.status,
            progress=1.0 if p.status == "succeeded" else None,
            outputs=[OutputRef(url=u, expires_at=expires, content_type="video/mp4") for u in outputs],
            error_class=error_class(p.error) if failed else None,
            error_message=self.scrub(p.error or "prediction failed") if failed else None,
            updated_at=p.completed_at or p.started_at or p.created_at,
        )

    def _error_text(self, body: Any) -> str:
        if isinstance(body, dict) and ("detail" in body or "title" in body):
            return f"{body.get('title') or ''}: {body.get('detail') or ''}".strip(": ")
        return str(body)[:300]

    def _provider_shaped(self, body: Any) -> bool:
        return isinstance(body, dict) and isinstance(body.get("status"), int) and "detail" in body
