"""The bundled provider emulator behind the VideoProvider interface.

httpx directly, with no retries anywhere: a submit is sent at most once per call, and a submit
that was sent but got no answer is reported as UNKNOWN so the caller reconciles by request key
before sending again (docs/architecture.md, "Failure paths").
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import httpx
from pydantic import ValidationError

from adapters.providers.base import (
    Capabilities,
    GenerationRequest,
    JobState,
    OutputRef,
    ProviderError,
    SubmitResult,
    Usage,
    WebhookRejected,
)
from adapters.providers.emulator_api import (
    ASPECT_RATIOS,
    LIST_PAGE_MAX,
    MAX_DURATION_S,
    MIN_DURATION_S,
    ErrorOut,
    JobList,
    JobOut,
)
from adapters.providers.http import json_body as _body
from adapters.providers.http import retry_after, retryable_status
from adapters.webhooks import StandardWebhookVerifier, verified
from contracts.provider import ErrorClass, JobStatus, SubmitOutcome, WebhookEvent

_STATUS = {
    "queued": JobStatus.QUEUED,
    "throttled": JobStatus.THROTTLED,  # over the emulator's running limit, as Runway reports it
    "running": JobStatus.RUNNING,
    "succeeded": JobStatus.SUCCEEDED,
    "failed": JobStatus.FAILED,
    "canceled": JobStatus.CANCELED,
}
# Failures caused by what we sent: sending the same again fails the same way.
_NON_RETRYABLE_PREFIXES = ("INPUT.", "VALIDATION.")
# ... except an image the provider could not fetch: it is in our storage (validated on import), and a
# new attempt sends a freshly signed URL, so a storage restart or an expired link does not end the task.
_RETRYABLE_INPUT = ("INPUT.IMAGE_UNREACHABLE",)
_MODERATION_PREFIX = "SAFETY."
MAX_LIST_PAGES = 100  # 10,000 jobs in one backstop window  # the emulator's content filter refused the prompt


def _error_text(resp: httpx.Response, body: Any) -> str:
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return f"{error.get('code', resp.status_code)}: {error.get('message', '')}"
    return f"HTTP {resp.status_code} {resp.reason_phrase}"


_CAPABILITIES = Capabilities(
    webhooks=False,  # per instance: offered only with a webhook secret
    cancel=True,
    reconcile_by_request_key=True,
    reconcile_by_list=False,
    aspect_ratios=ASPECT_RATIOS,
    min_duration_s=MIN_DURATION_S,
    max_duration_s=MAX_DURATION_S,
    min_poll_interval_s=1.0,
    # The emulator stores a job before it answers: a job it created is listed at once.
    acceptance_window_s=5.0,
)


def _provider_refusal(body: Any) -> bool:
    """The emulator answers errors in its own `{"error": {"code": ...}}` shape only for requests
    it refused before creating a job; a 5xx without that shape came from something in between
    (a proxy, a crash mid-request), so the job may exist."""
    error = body.get("error") if isinstance(body, dict) else None
    return isinstance(error, dict) and isinstance(error.get("code"), str)


class EmulatorProvider:
    """VideoProvider for the reelqueue emulator (`python -m emulator`); also a WebhookReceiver.

    Webhooks are offered only with the emulator's `--webhook-secret`: without it nothing could be
    verified, so submits do not ask for them.
    """

    name = "emulator"

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout_s: float = 10.0,
        submit_timeout_s: float = 30.0,
        webhook_secret: str | None = None,
    ):
        self._verifier = StandardWebhookVerifier(webhook_secret) if webhook_secret else None
        self.capabilities = _CAPABILITIES.model_copy(update={
            "submit_timeout_s": submit_timeout_s,
            "webhooks": self._verifier is not None,
            # the emulator serves its outputs itself, under the URL it is reached at
            "output_domains": [urlsplit(base_url).hostname or ""],
        })
        # httpx itself never retries a request; no transport-level retries are configured either.
        self._client = httpx.Client(
            base_url=base_url.rstrip("/"), headers={"Authorization": f"Bearer {api_key}"}, timeout=timeout_s
        )
        self._submit_timeout = httpx.Timeout(submit_timeout_s, connect=min(timeout_s, submit_timeout_s))

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> EmulatorProvider:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def submit(self, request: GenerationRequest) -> SubmitResult:
        def result(
            outcome: SubmitOutcome, error_class: ErrorClass | None, message: str | None, **fields: Any
        ) -> SubmitResult:
            return SubmitResult(
                outcome=outcome,
                provider=self.name,
                request_key=request.request_key,
                error_class=error_class,
                error_message=message,
                **fields,
            )

        try:
            resp = self._client.post(
                "/v1/jobs", json=request.model_dump(mode="json"), timeout=self._submit_timeout
            )
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            return result(SubmitOutcome.REJECTED_RETRYABLE, ErrorClass.RETRYABLE, f"not sent: {exc!r}")
        except httpx.TransportError as exc:  # read timeout, dropped connection: the job may exist
            return result(SubmitOutcome.UNKNOWN, ErrorClass.UNKNOWN_OUTCOME, f"sent, no answer: {exc!r}")

        body = _body(resp)
        answer = {
            "http_status": resp.status_code,
            "raw_summary": {"http_status": resp.status_code, "body": body},
        }
        if resp.is_success:
            try:
                job = JobOut.model_validate(body)
            except ValidationError:
                return result(
                    SubmitOutcome.UNKNOWN, ErrorClass.UNKNOWN_OUTCOME, "accepted, unreadable answer", **answer
                )
            return result(SubmitOutcome.ACCEPTED, None, None, job_id=job.id, **answer)
        message = _error_text(resp, body)
        if resp.status_code >= 500 and not _provider_refusal(body):
            # Sent, and something failed after the body left: the job may exist.
            return result(SubmitOutcome.UNKNOWN, ErrorClass.UNKNOWN_OUTCOME, message, **answer)
        if retryable_status(resp.status_code):
            return result(
                SubmitOutcome.REJECTED_RETRYABLE,
                ErrorClass.RETRYABLE,
                message,
                retry_after_s=retry_after(resp.headers),
                **answer,
            )
        return result(SubmitOutcome.REJECTED_FINAL, ErrorClass.NON_RETRYABLE, message, **answer)

    def get_job(self, job_id: str) -> JobState:
        return self._state(self._call("GET", f"/v1/jobs/{job_id}"))

    def find_by_request_key(self, request_key: str) -> list[JobState]:
        jobs = self._job_list(self._call("GET", "/v1/jobs", params={"request_key": request_key}))
        return [self._job_state(job) for job in jobs.data]

    @staticmethod
    def _job_list(body: Any) -> JobList:
        try:
            return JobList.model_validate(body)
        except ValidationError as exc:
            raise ProviderError(f"unexpected job list: {exc}", retryable=False) from exc

    def list_jobs(self, since: datetime) -> list[JobState]:
        """The jobs created since `since`, a page at a time (JobLister)."""
        found: list[JobState] = []
        for page in range(MAX_LIST_PAGES):
            params = {"created_after": since.isoformat(), "offset": str(page * LIST_PAGE_MAX),
                      "limit": str(LIST_PAGE_MAX)}
            jobs = self._job_list(self._call("GET", "/v1/jobs", params=params))
            found += [self._job_state(job) for job in jobs.data]
            if not jobs.has_more:
                return found
        raise ProviderError(f"more than {MAX_LIST_PAGES} pages of jobs since {since:%Y-%m-%d %H:%M}: "
                            "ask for a shorter window", retryable=False)

    def cancel(self, job_id: str) -> JobState:
        return self._state(self._call("POST", f"/v1/jobs/{job_id}/cancel"))

    def parse_webhook(self, headers: Mapping[str, str], body: bytes) -> WebhookEvent:
        """A Standard Webhooks delivery whose body is the job JSON, as GET /v1/jobs/{id} gives it."""
        delivery = verified(self._verifier, headers, body)
        try:
            job = JobOut.model_validate_json(body)
            return WebhookEvent(
                event_id=delivery.msg_id,
                job_id=job.id,
                request_key=job.request_key,
                status=_STATUS[job.status],
                raw_status=job.status,
                progress=job.progress,
                observed_at=job.updated_at,
                verified=True,
                headers=delivery.headers,
                cost=job.usage.cost if job.usage else None,
                outputs=[o.url for o in job.output or []],
            )
        except ValidationError:
            raise WebhookRejected("the body is not an emulator job, or its ids are too long", malformed=True) from None

    def _call(self, method: str, path: str, params: dict[str, str] | None = None) -> Any:
        """One query call; ProviderError says whether asking again may help."""
        try:
            resp = self._client.request(method, path, params=params)
        except httpx.TransportError as exc:
            raise ProviderError(f"{method} {path}: {exc!r}", retryable=True) from exc
        body = _body(resp)
        if resp.is_error:
            raise ProviderError(
                f"{method} {path}: {_error_text(resp, body)}",
                retryable=retryable_status(resp.status_code),
                http_status=resp.status_code,
            )
        return body

    def _state(self, body: Any) -> JobState:
        try:
            return self._job_state(JobOut.model_validate(body))
        except ValidationError as exc:
            raise ProviderError(f"unexpected job: {exc}", retryable=False) from exc

    def _job_state(self, job: JobOut) -> JobState:
        return JobState(
            provider=self.name,
            job_id=job.id,
            request_key=job.request_key,
            status=_STATUS[job.status],
            raw_status=job.status,
            progress=job.progress,
            outputs=[
                OutputRef(url=o.url, expires_at=o.expires_at, content_type="video/mp4")
                for o in job.output or []
            ],
            usage=Usage(seconds=job.usage.seconds, cost=job.usage.cost) if job.usage else None,
            error_class=_error_class(job.error),
            error_message=f"{job.error.code}: {job.error.message}" if job.error else None,
            updated_at=job.updated_at,
        )


def _error_class(error: ErrorOut | None) -> ErrorClass | None:
    if error is None:
        return None
    if error.code.startswith(_MODERATION_PREFIX):
        return ErrorClass.MODERATION
    final = error.code.startswith(_NON_RETRYABLE_PREFIXES) and not error.code.startswith(_RETRYABLE_INPUT)
    return ErrorClass.NON_RETRYABLE if final else ErrorClass.RETRYABLE
