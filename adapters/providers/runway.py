"""Runway's developer API (api.dev.runwayml.com), API version `2024-11-06` (`X-Runway-Version`).

Checked against the official `runwayml` Python SDK (its generated task and image_to_video types).
httpx rather than that SDK: `max_retries=0` and `base_url` would stop its retries (2 by default,
POST included) and point it at the emulator, but it raises APITimeoutError for a connect timeout and
a read timeout alike, and APIConnectionError for a refused connection and a dropped one alike (the
httpx error only as `__cause__`), while the submit's outcome is exactly that difference: not sent
(resubmit) or sent without an answer (reconcile first). See adapters/providers/http.py.

- submit: `POST /v1/image_to_video` with `promptImage`, `promptText` (<= 1000 chars), `ratio` in
  pixels (`720:1280`), `duration` (whole seconds, 2..10 for gen4_turbo), `seed` (derived from our request key,
  so a resubmit asks for the same video). Runway has no field for our own id.
- status: `PENDING THROTTLED RUNNING SUCCEEDED FAILED CANCELLED`, `progress` 0..1 while running;
  `failureCode` `SAFETY.*` / `INPUT_PREPROCESSING.SAFETY.*` is moderation (never retried),
  `INTERNAL.BAD_OUTPUT.*` and other `INTERNAL.*` are retryable, other input codes are final.
- reconcile: impossible (no list endpoint), so an unknown submit goes to a person
  (NEEDS_ATTENTION, the workflow's policy for an unaskable provider).
- cancel: `DELETE /v1/tasks/{id}` cancels a running task but deletes a finished one, so the
  adapter reads the task first and only deletes what has not ended. A cancelled task is billed
  only for what Runway already charged; the price table is applied to finished videos only.
- cost: Runway reports none per task: the price table (USD per second, like every hosted
  provider's table: gen4_turbo costs 5 Runway credits of $0.01 per second).
- outputs: URLs that expire within 24-48 h (re-read the task for fresh ones); no webhooks.
- polling: at most one status call per task every 5 s, as Runway asks.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from adapters.providers.base import Capabilities, GenerationRequest, JobState, OutputRef, ProviderError, SubmitResult
from adapters.providers.http import HttpProvider, request_seed
from contracts.provider import ErrorClass, JobStatus, SubmitOutcome

API_VERSION = "2024-11-06"
# Our ratios in Runway's pixel vocabulary (image_to_video, gen4_turbo).
RATIOS = {"9:16": "720:1280", "16:9": "1280:720", "1:1": "960:960"}
RunwayStatus = Literal["PENDING", "THROTTLED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"]
STATUS = {
    "PENDING": JobStatus.QUEUED, "THROTTLED": JobStatus.THROTTLED, "RUNNING": JobStatus.RUNNING,
    "SUCCEEDED": JobStatus.SUCCEEDED, "FAILED": JobStatus.FAILED, "CANCELLED": JobStatus.CANCELED,
}
_ENDED = {"SUCCEEDED", "FAILED", "CANCELLED"}


class RunwayTask(BaseModel):
    """GET /v1/tasks/{id} (the SDK's TaskRetrieveResponse union, flattened)."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    id: str
    status: RunwayStatus
    created_at: datetime = Field(alias="createdAt")
    progress: float | None = None
    output: list[str] | None = None
    failure: str | None = None
    failure_code: str | None = Field(default=None, alias="failureCode")


def failure_class(code: str | None) -> ErrorClass:
    """Runway's task failure codes (docs: errors/task-failures) to our error classes."""
    code = code or ""
    if code.startswith(("SAFETY.", "INPUT_PREPROCESSING.SAFETY.")):
        return ErrorClass.MODERATION
    if code.startswith(("INPUT_PREPROCESSING.", "ASSET.")):
        return ErrorClass.NON_RETRYABLE
    return ErrorClass.RETRYABLE  # INTERNAL.BAD_OUTPUT.*, other INTERNAL.*, or no code


class RunwayProvider(HttpProvider):
    name = "runway"
    api_version = API_VERSION
    default_base_url = "https://api.dev.runwayml.com"
    emulator_prefix = "runway"
    default_prices = {"gen4_turbo": 0.05, "gen3a_turbo": 0.05}  # 5 Runway credits/s at $0.01
    cancel_semantics = "DELETE /v1/tasks/{id}: cancels a task that has not ended (a finished one is never deleted)"
    check_path = "/v1/organization"
    base_capabilities = Capabilities(
        webhooks=False, cancel=True, reconcile_by_request_key=False, reconcile_by_list=False,
        aspect_ratios=list(RATIOS), min_duration_s=2, max_duration_s=10, durations_s=[float(s) for s in range(2, 11)],
        min_poll_interval_s=5.0, output_domains=["dnznrvs05pmza.cloudfront.net"], output_ttl_s=24 * 3600,
        acceptance_window_s=60.0,
    )

    def _auth_headers(self) -> dict[str, str]:
        return {**super()._auth_headers(), "X-Runway-Version": API_VERSION}

    def submit(self, request: GenerationRequest) -> SubmitResult:
        if not request.image_url:
            return self._result(request.request_key, SubmitOutcome.REJECTED_FINAL, ErrorClass.NON_RETRYABLE,
                                "runway image_to_video needs a product image")
        body = {
            "model": request.model, "promptImage": request.image_url, "promptText": request.prompt[:1000],
            "ratio": RATIOS[request.aspect_ratio], "duration": int(request.duration_s),
            "seed": request_seed(request.request_key),
        }
        sent = self._send_submit(request.request_key, "POST", "/v1/image_to_video", json=body)
        return sent if isinstance(sent, SubmitResult) else self._submit_answer(request.request_key, sent)

    def get_job(self, job_id: str) -> JobState:
        return self._state(self._call("GET", f"/v1/tasks/{job_id}"))

    def find_by_request_key(self, request_key: str) -> list[JobState]:
        raise ProviderError("runway offers no lookup of tasks: an unknown submit needs a person", retryable=False)

    def cancel(self, job_id: str) -> JobState:
        current = self.get_job(job_id)
        if current.raw_status in _ENDED:  # DELETE would delete a finished task and its output
            return current
        self._call("DELETE", f"/v1/tasks/{job_id}")
        try:
            return self.get_job(job_id)
        except ProviderError as exc:
            if exc.http_status != 404:
                raise
            return current.model_copy(update={"status": JobStatus.CANCELED, "raw_status": "CANCELLED",
                                              "progress": None})

    def _state(self, body: Any) -> JobState:
        try:
            task = RunwayTask.model_validate(body)
        except ValidationError as exc:
            raise ProviderError(f"unexpected runway task: {exc.errors()[:2]}", retryable=False) from exc
        failed = task.status == "FAILED"
        return JobState(
            provider=self.name, job_id=task.id, status=STATUS[task.status], raw_status=task.status,
            progress=1.0 if task.status == "SUCCEEDED" else task.progress,
            outputs=[OutputRef(url=url, content_type="video/mp4") for url in task.output or []],
            error_class=failure_class(task.failure_code) if failed else None,
            error_message=self.scrub(f"{task.failure_code or 'FAILED'}: {task.failure or ''}") if failed else None,
            updated_at=task.created_at,
        )

    def billed(self, state: JobState) -> bool:
        """Runway charges for videos it delivered; failed and cancelled tasks are not charged."""
        return state.status is JobStatus.SUCCEEDED

    def _error_text(self, body: Any) -> str:
        error = body.get("error") if isinstance(body, dict) else None
        return error if isinstance(error, str) else str(body)[:300]

    def _provider_shaped(self, body: Any) -> bool:
        return isinstance(body, dict) and isinstance(body.get("error"), str)
