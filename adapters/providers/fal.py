"""fal's queue API (queue.fal.run): image-to-video apps such as `fal-ai/kling-video`.

Checked against the official `fal-client` source (fal-ai/fal, projects/fal_client: submit,
status, result, cancel, its error parsing). httpx rather than fal-client: the client retries a
request up to 10 times on 408/409/429 and on connection errors, submit included, with no switch
to turn that off for one call.

- auth: `Authorization: Key <REELQUEUE_FAL_API_KEY>`.
- submit: `POST /{app}` with the app's input (`prompt`, `image_url`, `duration` "5"|"10",
  `aspect_ratio`) -> `request_id` and the request's URLs. Our job id is the request's path under
  its app, `{owner}/{alias}/requests/{request_id}`, which every later call needs.
- status: `GET .../status`: `IN_QUEUE` (`queue_position`), `IN_PROGRESS`, `COMPLETED` (with
  `error`/`error_type` when it failed); the video comes from `GET .../requests/{id}`
  (`video.url`). `content_policy_violation` is moderation; other failures are retryable. Errors
  are `{"detail": ...}`; no retry header is documented.
- reconcile: impossible (no lookup by anything of ours), so an unknown submit goes to a person.
- cancel: `PUT .../cancel` (202, or 400 when already completed); a cancelled request is not
  billed, a completed one is: the price table (USD per second of video).
- webhooks: fal signs them with ed25519 against its published key set; not wired here (status
  comes from polling).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from adapters.providers.base import Capabilities, GenerationRequest, JobState, OutputRef, ProviderError, SubmitResult
from adapters.providers.http import CheckResult, DetailErrors, HttpProvider
from contracts.provider import ErrorClass, JobStatus

API_VERSION = "queue v1"
FalStatus = Literal["IN_QUEUE", "IN_PROGRESS", "COMPLETED"]
CANCELLED_TYPES = ("request_cancelled", "cancelled", "canceled")
_UNKNOWN_REQUEST = "00000000-0000-0000-0000-000000000000"


class FalStatusBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    status: FalStatus
    queue_position: int | None = None
    error: str | None = None
    error_type: str | None = None
    metrics: dict[str, Any] | None = None


def app_of(model: str) -> str:
    """`fal-ai/kling-video/v2.1/standard/image-to-video` -> `fal-ai/kling-video` (the queue's app)."""
    return "/".join(model.split("/")[:2])


def error_class(error_type: str | None, error: str | None) -> ErrorClass:
    text = f"{error_type or ''} {error or ''}".lower()
    return ErrorClass.MODERATION if "content_policy" in text else ErrorClass.RETRYABLE


class FalProvider(DetailErrors, HttpProvider):
    name = "fal"
    api_version = API_VERSION
    default_base_url = "https://queue.fal.run"
    emulator_prefix = "fal"
    default_prices = {"fal-ai/kling-video/v2.1/standard/image-to-video": 0.05,
                      "fal-ai/kling-video/v2.1/pro/image-to-video": 0.09}
    cancel_semantics = "PUT .../requests/{id}/cancel: a cancelled request is not billed, a completed one is"
    job_id_field = "request_id"
    check_path = f"/fal-ai/kling-video/requests/{_UNKNOWN_REQUEST}/status"
    base_capabilities = Capabilities(
        webhooks=False, cancel=True, reconcile_by_request_key=False, reconcile_by_list=False,
        aspect_ratios=["9:16", "16:9", "1:1"], min_duration_s=5, max_duration_s=10, durations_s=[5.0, 10.0],
        min_poll_interval_s=2.0, output_domains=["v3.fal.media", "fal.media"], acceptance_window_s=60.0,
    )

    def _auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Key {self.config.api_key.get_secret_value()}"}

    def check(self) -> CheckResult:
        """Asks for a request that does not exist: 404 means the key was accepted."""
        result = super().check()
        if result.http_status == 404:
            return result.model_copy(update={"ok": True, "detail": "the key works (an unknown request answered 404)"})
        return result

    def submit(self, request: GenerationRequest) -> SubmitResult:
        app = app_of(request.model)
        body = {"prompt": request.prompt, "duration": str(int(request.duration_s)),
                "aspect_ratio": request.aspect_ratio, **({"image_url": request.image_url} if request.image_url else {})}
        sent = self._send_submit(request.request_key, "POST", f"/{request.model}", json=body)
        if isinstance(sent, SubmitResult):
            return sent
        result = self._submit_answer(request.request_key, sent)
        if result.job_id is not None:  # the request's path under its app
            result = result.model_copy(update={"job_id": f"{app}/requests/{result.job_id}"})
        return result

    def get_job(self, job_id: str) -> JobState:
        status = self._status(self._call("GET", f"/{job_id}/status"))
        outputs: list[OutputRef] = []
        if status.status == "COMPLETED" and not status.error:
            outputs = self._outputs(self._call("GET", f"/{job_id}"))
        return self._state(job_id, status, outputs)

    def cancel(self, job_id: str) -> JobState:
        try:
            self._call("PUT", f"/{job_id}/cancel")
        except ProviderError as exc:
            if exc.http_status != 400:  # 400: already completed
                raise
        return self.get_job(job_id)

    def find_by_request_key(self, request_key: str) -> list[JobState]:
        raise ProviderError("fal offers no lookup of requests: an unknown submit needs a person", retryable=False)

    def billed(self, state: JobState) -> bool:
        return state.status is JobStatus.SUCCEEDED

    def _status(self, body: Any) -> FalStatusBody:
        try:
            return FalStatusBody.model_validate(body)
        except ValidationError as exc:
            raise ProviderError(f"unexpected fal status: {exc.errors()[:2]}", retryable=False) from exc

    def _outputs(self, body: Any) -> list[OutputRef]:
        video = body.get("video") if isinstance(body, dict) else None
        if not isinstance(video, dict) or not isinstance(video.get("url"), str):
            raise ProviderError("fal result without video.url", retryable=False)
        return [OutputRef(url=video["url"], content_type=video.get("content_type") or "video/mp4")]

    def _state(self, job_id: str, s: FalStatusBody, outputs: list[OutputRef]) -> JobState:
        if s.status != "COMPLETED":
            status = JobStatus.QUEUED if s.status == "IN_QUEUE" else JobStatus.RUNNING
        elif not s.error:
            status = JobStatus.SUCCEEDED
        elif (s.error_type or "").lower() in CANCELLED_TYPES:
            status = JobStatus.CANCELED
        else:
            status = JobStatus.FAILED
        failed = status is JobStatus.FAILED
        return JobState(
            provider=self.name, job_id=job_id, status=status,
            raw_status=s.status if not s.error else (s.error_type or "error")[:32],  # COMPLETED says too little
            progress=1.0 if status is JobStatus.SUCCEEDED else None, outputs=outputs,
            error_class=error_class(s.error_type, s.error) if failed else None,
            error_message=self.scrub(f"{s.error_type or 'error'}: {s.error}") if failed else None,
            updated_at=datetime.now(UTC),
        )

    def _refusal_class(self, status: int, body: Any) -> ErrorClass | None:
        return ErrorClass.MODERATION if "content_policy" in str(body) and status in (400, 422) else None
