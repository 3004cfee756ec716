"""The normalized provider interface: what an adapter is asked (GenerationRequest), what it answers
(SubmitResult, JobState), what it can do (Capabilities), and the VideoProvider protocol itself.

Activities speak only these models; each provider module turns them into its own HTTP API and
back. Nothing provider-specific leaks past an adapter. The outcomes, statuses and error classes in
these models, and the normalized webhook, cross every layer: they live in contracts/provider.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field

from contracts.provider import ErrorClass, JobStatus, SubmitOutcome, WebhookEvent


class GenerationRequest(BaseModel):
    """What we ask a provider to render. `request_key` is ours: task id + attempt number."""

    request_key: str
    model: str
    prompt: str
    image_url: str | None = None
    aspect_ratio: str  # "9:16", "16:9", "1:1"
    duration_s: float
    overlay_lines: list[str] = Field(default_factory=list)  # text burned into the video (title, price, hook)
    webhook_url: str | None = None


class SubmitResult(BaseModel):
    outcome: SubmitOutcome
    provider: str
    request_key: str
    job_id: str | None = None
    http_status: int | None = None
    error_class: ErrorClass | None = None
    error_message: str | None = None
    retry_after_s: float | None = None
    raw_summary: dict = Field(default_factory=dict)


class OutputRef(BaseModel):
    url: str
    expires_at: datetime | None = None
    content_type: str | None = None


class Usage(BaseModel):
    seconds: float | None = None
    cost: float | None = None  # in credits, as the provider reports it
    currency: str = "credits"


class JobState(BaseModel):
    provider: str
    job_id: str
    request_key: str | None = None
    status: JobStatus
    raw_status: str
    progress: float | None = None  # 0..1, display only: never drives a terminal status
    outputs: list[OutputRef] = Field(default_factory=list)
    usage: Usage | None = None
    error_class: ErrorClass | None = None
    error_message: str | None = None
    updated_at: datetime | None = None


class Capabilities(BaseModel):
    webhooks: bool = False
    cancel: bool = True
    reconcile_by_request_key: bool = False
    reconcile_by_list: bool = False
    aspect_ratios: list[str] = Field(default_factory=lambda: ["9:16", "16:9", "1:1"])
    min_duration_s: float = 1.0
    max_duration_s: float = 10.0
    durations_s: list[float] | None = None  # the only durations offered (None: any in min..max)
    models: list[str] | None = None  # the models accepted (None: any)
    output_domains: list[str] = Field(default_factory=list)  # hosts output URLs come from
    output_ttl_s: float | None = None  # how long an output URL lives
    min_poll_interval_s: float = 1.0
    # How long after our submit call ended a job it created may still be missing from the
    # provider's lookup (eventual consistency); "never created" is concluded only after it.
    acceptance_window_s: float = 30.0
    # The adapter's own bound on one submit call; a submit whose run died mid-call ended by then.
    submit_timeout_s: float = 30.0
    # Hosts the provider serves its outputs from ("cdn.example.com", or ".example.com" for any name
    # under it): an output URL elsewhere is refused before it is fetched. Redirects from there are
    # checked by the fetcher's SSRF rules (docs/architecture.md, "Security").
    output_domains: list[str] = Field(default_factory=list)

    @property
    def can_reconcile(self) -> bool:
        """Whether the provider can be asked which jobs exist for one of our submits."""
        return self.reconcile_by_request_key or self.reconcile_by_list


class ProviderError(Exception):
    """A query/cancel call failed; `retryable` says whether asking again may help."""

    def __init__(self, message: str, *, retryable: bool, http_status: int | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.http_status = http_status


@runtime_checkable
class VideoProvider(Protocol):
    """One outside video provider. Implementations must not retry submit on their own."""

    name: str
    capabilities: Capabilities

    def submit(self, request: GenerationRequest) -> SubmitResult:
        """Create a job. Never raises for provider answers: the outcome says what happened."""

    def get_job(self, job_id: str) -> JobState:
        """Current status; raises ProviderError when the provider cannot be asked."""

    def find_by_request_key(self, request_key: str) -> list[JobState]:
        """Jobs the provider holds for our request key (reconcile an unknown submit)."""

    def cancel(self, job_id: str) -> JobState:
        """Ask the provider to stop; returns the state after the call."""


@runtime_checkable
class JobLister(Protocol):
    """Optional provider capability: list the jobs created on our account since a moment (the
    provider backstop compares them with the ledger). A provider without a listing cannot be
    checked this way: its jobs are known only through our own submits."""

    def list_jobs(self, since: datetime) -> list[JobState]:
        """Every job created at or after `since`, oldest first; raises ProviderError."""


class WebhookRejected(Exception):
    """A webhook we will not act on. `reason` goes back to the sender, so it never names a secret;
    `malformed` says the delivery was authentic but unusable (400) rather than unauthenticated (401)."""

    def __init__(self, reason: str, *, malformed: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.malformed = malformed


@runtime_checkable
class WebhookReceiver(Protocol):
    """Optional provider capability: verify and read the provider's webhooks."""

    def parse_webhook(self, headers: Mapping[str, str], body: bytes) -> WebhookEvent:
        """Verify `body` exactly as received; raises WebhookRejected."""
