"""What every hosted provider adapter shares: configuration, one httpx client, submit outcomes.

httpx directly, never an SDK's retry loop: a submit is sent at most once per call. A connect
error means nothing was sent (safe to resubmit); a read timeout or dropped connection after the
body left means the job may exist (UNKNOWN: reconcile first). The official SDKs fold both into
one "connection error" and retry POST on their own by default, which is why the adapters speak
HTTP themselves (each adapter's docstring names the API version it speaks).

Secrets: the API key lives in the client's default headers only; every message an adapter
produces goes through `scrub`, so no key reaches a log, a state event or `show`.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from typing import Any, ClassVar

import httpx
from pydantic import BaseModel, Field, SecretStr

from adapters.providers.base import Capabilities, JobState, ProviderError, SubmitResult, Usage
from contracts.provider import ErrorClass, JobStatus, SubmitOutcome

# What an emulated provider sends when no key is configured (and Kling signs its tokens with).
EMULATED_API_KEY = "emulator-dev-key-for-emulated-providers"
# The AWS access key id the emulator's Rekognition dialect knows; its secret is EMULATED_API_KEY.
EMULATED_AWS_ACCESS_KEY_ID = "AKIAEMULATEDPROVIDER"


def retryable_status(status: int) -> bool:
    return status in (408, 429) or status >= 500


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from `retry-after-ms` or `Retry-After` (seconds or an HTTP date)."""
    if (ms := headers.get("retry-after-ms")) is not None:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def request_seed(request_key: str) -> int:
    """A stable seed per request key (0..2**32-1): a resubmit asks for the same video, and a
    provider that echoes its input can be searched for our submit by it."""
    return int.from_bytes(hashlib.sha256(request_key.encode()).digest()[:4], "big")


def json_body(resp: httpx.Response) -> Any:
    try:
        return resp.json()
    except ValueError:
        return {"text": resp.text[:500]}


class ProviderConfig(BaseModel):
    """One provider's settings (REELQUEUE_<PROVIDER>_API_KEY, _BASE_URL, _PRICES, ...)."""

    name: str
    api_key: SecretStr = SecretStr("")
    base_url: str
    emulated: bool = False  # pointed at the emulator's dialect by `dev up --emulate-providers`
    prices: dict[str, float] = Field(default_factory=dict)  # model -> credits (USD) per second of video
    webhook_secret: SecretStr = SecretStr("")
    extra_secret: SecretStr = SecretStr("")  # a second credential (Kling's secret key)
    submit_timeout_s: float = 20.0
    timeout_s: float = 10.0

    @property
    def env_prefix(self) -> str:
        return f"REELQUEUE_{self.name.upper()}"

    def secrets(self) -> list[str]:
        return [s.get_secret_value() for s in (self.api_key, self.webhook_secret, self.extra_secret)
                if len(s.get_secret_value()) >= 4]


class CheckResult(BaseModel):
    """`reelqueue providers check NAME`: one authenticated read-only call."""

    provider: str
    ok: bool
    reachable: bool
    http_status: int | None = None
    detail: str


class DetailErrors:
    """Error bodies in FastAPI's shape, `{"detail": ...}` (Luma, fal)."""

    def _error_text(self, body: Any) -> str:
        detail = body.get("detail") if isinstance(body, dict) else None
        return detail if isinstance(detail, str) else str(detail or body)[:300]

    def _provider_shaped(self, body: Any) -> bool:
        return isinstance(body, dict) and "detail" in body


class HttpProvider:
    """Base of the hosted-provider adapters. Subclasses set the class attributes and implement
    the VideoProvider methods with `_send_submit`, `_submit_answer` and `_call`."""

    name: ClassVar[str]
    api_version: ClassVar[str]  # what the adapter speaks, shown by `reelqueue providers`
    default_base_url: ClassVar[str]
    emulator_prefix: ClassVar[str]  # the emulator dialect's path prefix
    default_prices: ClassVar[dict[str, float]]  # credits per second of video, per model
    base_capabilities: ClassVar[Capabilities]
    cancel_semantics: ClassVar[str]
    check_path: ClassVar[str]  # an authenticated, read-only GET

    def __init__(self, config: ProviderConfig):
        self.config = config
        self.prices = {**self.default_prices, **config.prices}
        domains = list(self.base_capabilities.output_domains)
        if config.emulated:
            domains.append(httpx.URL(config.base_url).host)
        self.capabilities = self.base_capabilities.model_copy(
            update={"models": sorted(self.prices), "output_domains": domains,
                    "submit_timeout_s": config.submit_timeout_s})
        self._client = httpx.Client(base_url=config.base_url.rstrip("/"), headers=self._auth_headers(),
                                    timeout=config.timeout_s)
        self._submit_timeout = httpx.Timeout(config.submit_timeout_s, connect=min(config.timeout_s, 10.0))

    # -- configuration -----------------------------------------------------------------------

    @property
    def missing_setting(self) -> str | None:
        """The environment variable to set before this provider can be used, if any."""
        return None if self.config.api_key.get_secret_value() else f"{self.config.env_prefix}_API_KEY"

    def _auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.config.api_key.get_secret_value()}"}

    def priced(self, state: JobState, model: str, duration_s: float) -> JobState:
        """`state` with a cost: the provider's reported usage, else the price table for the video
        we asked for when the provider bills this outcome (`billed`), else 0."""
        ended = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELED, JobStatus.EXPIRED)
        if state.status not in ended or (state.usage is not None and state.usage.cost is not None):
            return state
        price = self.prices.get(model, 0.0) if self.billed(state) else 0.0
        usage = Usage(seconds=duration_s if self.billed(state) else None, cost=round(price * duration_s, 6))
        return state.model_copy(update={"usage": usage})

    def billed(self, state: JobState) -> bool:
        """Whether the provider charges for a job that ended like `state` (per provider)."""
        raise NotImplementedError

    def scrub(self, text: str) -> str:
        for secret in self.config.secrets():
            text = text.replace(secret, "***")
        return text

    def describe(self) -> dict[str, Any]:
        """What `reelqueue providers` shows (never a secret)."""
        caps = self.capabilities
        return {
            "name": self.name, "configured": self.missing_setting is None, "missing_setting": self.missing_setting,
            "emulated": self.config.emulated, "base_url": self.config.base_url, "api_version": self.api_version,
            "capabilities": caps.model_dump(mode="json"), "cancel": self.cancel_semantics,
            "prices_credits_per_s": dict(sorted(self.prices.items())),
        }

    def close(self) -> None:
        self._client.close()

    # -- calls -------------------------------------------------------------------------------

    def check(self) -> CheckResult:
        try:
            resp = self._client.get(self.check_path)
        except httpx.TransportError as exc:
            return CheckResult(provider=self.name, ok=False, reachable=False,
                               detail=self.scrub(f"network unreachable: {exc!r} ({self.config.base_url})"))
        if resp.is_success:
            return CheckResult(provider=self.name, ok=True, reachable=True, http_status=resp.status_code,
                               detail=f"the key works (GET {self.check_path} answered {resp.status_code})")
        why = "the key was refused" if resp.status_code in (401, 403) else "the provider answered an error"
        return CheckResult(provider=self.name, ok=False, reachable=True, http_status=resp.status_code,
                           detail=self.scrub(f"{why}: HTTP {resp.status_code} {self._error_text(json_body(resp))}"))

    def _send_submit(self, request_key: str, method: str, path: str, **kw: Any) -> httpx.Response | SubmitResult:
        """Send one submit; a SubmitResult when no HTTP answer came back."""
        try:
            return self._client.request(method, path, timeout=self._submit_timeout, **kw)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            return self._result(request_key, SubmitOutcome.REJECTED_RETRYABLE, ErrorClass.RETRYABLE,
                                f"not sent: {exc!r}")
        except httpx.TransportError as exc:  # read timeout, dropped connection: the job may exist
            return self._result(request_key, SubmitOutcome.UNKNOWN, ErrorClass.UNKNOWN_OUTCOME,
                                f"sent, no answer: {exc!r}")

    def _result(self, request_key: str, outcome: SubmitOutcome, error_class: ErrorClass | None,
                message: str | None, **fields: Any) -> SubmitResult:
        return SubmitResult(outcome=outcome, provider=self.name, request_key=request_key, error_class=error_class,
                            error_message=self.scrub(message) if message else None, **fields)

    def _refused(self, request_key: str, refusal: ErrorClass, message: str, **fields: Any) -> SubmitResult:
        """A submit the provider refused before creating a job, by its error class."""
        outcome = SubmitOutcome.REJECTED_RETRYABLE if refusal is ErrorClass.RETRYABLE else SubmitOutcome.REJECTED_FINAL
        return self._result(request_key, outcome, refusal, message, **fields)

    def _submit_answer(self, request_key: str, resp: httpx.Response) -> SubmitResult:
        """Classify a submit's HTTP answer; `_job_id` reads the job id from a success body."""
        body = json_body(resp)
        answer = {"http_status": resp.status_code, "raw_summary": {"http_status": resp.status_code, "body": body}}
        if resp.is_success:
            job_id = self._job_id(body)
            if job_id is None:
                return self._result(request_key, SubmitOutcome.UNKNOWN, ErrorClass.UNKNOWN_OUTCOME,
                                    "accepted, unreadable answer", **answer)
            return self._result(request_key, SubmitOutcome.ACCEPTED, None, None, job_id=job_id, **answer)
        message = f"HTTP {resp.status_code}: {self._error_text(body)}"
        refusal = self._refusal_class(resp.status_code, body)
        if refusal is not None:
            return self._refused(request_key, refusal, message, retry_after_s=retry_after(resp.headers), **answer)
        if resp.status_code >= 500 and not self._provider_shaped(body):
            # Sent, and something failed after the body left (a proxy, a crash): the job may exist.
            return self._result(request_key, SubmitOutcome.UNKNOWN, ErrorClass.UNKNOWN_OUTCOME, message, **answer)
        if retryable_status(resp.status_code):
            return self._result(request_key, SubmitOutcome.REJECTED_RETRYABLE, ErrorClass.RETRYABLE, message,
                                retry_after_s=retry_after(resp.headers), **answer)
        return self._result(request_key, SubmitOutcome.REJECTED_FINAL, ErrorClass.NON_RETRYABLE, message, **answer)

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        """One query or cancel call; ProviderError says whether asking again may help."""
        try:
            resp = self._client.request(method, path, **kw)
        except httpx.TransportError as exc:
            raise ProviderError(self.scrub(f"{method} {path}: {exc!r}"), retryable=True) from exc
        body = json_body(resp) if resp.content else {}
        if resp.is_error:
            raise ProviderError(self.scrub(f"{method} {path}: HTTP {resp.status_code} {self._error_text(body)}"),
                                retryable=retryable_status(resp.status_code), http_status=resp.status_code)
        return body

    # -- per provider ------------------------------------------------------------------------

    job_id_field: ClassVar[str] = "id"  # where a submit's answer carries the job id

    def _job_id(self, body: Any) -> str | None:
        job_id = body.get(self.job_id_field) if isinstance(body, dict) else None
        return job_id if isinstance(job_id, str) and job_id else None

    def _error_text(self, body: Any) -> str:
        raise NotImplementedError

    def _provider_shaped(self, body: Any) -> bool:
        """Whether an error body is the provider's own (it refused before creating a job)."""
        raise NotImplementedError

    def _refusal_class(self, status: int, body: Any) -> ErrorClass | None:
        """A provider-specific class for a refused submit (moderation, a rate-limit code); None:
        decide by HTTP status."""
        return None
