"""Luma's Dream Machine API v1 (api.lumalabs.ai/dream-machine/v1): video generations.

Checked against the official `lumaai` Python SDK (Stainless-generated: generation, video create,
list and credits types, and its tests). httpx rather than that SDK, for the reason given in
adapters/providers/runway.py: the same generated client can be told `max_retries=0`, but it cannot
tell a submit that was never sent from one whose answer was lost.

- submit: `POST /generations/video` `{model, prompt, aspect_ratio, duration: "5s"|"9s",
  resolution: "720p", keyframes: {frame0: {type: image, url}}}`. Luma takes no id of ours.
- status: `state` `queued dreaming completed failed`, `failure_reason` (moderation wording =
  moderation; other failures retryable); errors `{"detail": ...}`. No retry header is documented
  on 429, so the workflow's backoff applies.
- reconcile: Luma echoes each generation's `request`, so an unknown submit is found by listing
  `GET /generations?limit&offset` (newest first) back to when it was sent and matching model,
  prompt, ratio, duration and the image (`find_by_request`).
- cancel: none (DELETE removes a generation's record; it is not documented to stop or refund a
  render), so a cancelled generation is followed until it ends and the video wins.
- cost: no per-generation usage in the answer: the price table (USD per second, 720p).
- outputs: `assets.video`; callbacks are unsigned, so none are asked for (polling).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, ValidationError

from adapters.providers.base import Capabilities, GenerationRequest, JobState, OutputRef, ProviderError, SubmitResult
from adapters.providers.http import DetailErrors, HttpProvider
from contracts.provider import ErrorClass, JobStatus

API_VERSION = "dream-machine v1"
LumaState = Literal["queued", "dreaming", "completed", "failed"]
STATUS = {"queued": JobStatus.QUEUED, "dreaming": JobStatus.RUNNING, "completed": JobStatus.SUCCEEDED,
          "failed": JobStatus.FAILED}
PAGE = 100
MAX_PAGES = 20
CLOCK_SKEW = timedelta(seconds=60)


class LumaGeneration(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str
    state: LumaState
    failure_reason: str | None = None
    created_at: datetime
    model: str | None = None
    assets: dict[str, str | None] | None = None
    request: dict[str, Any] | None = None


def _same_image(a: str | None, b: str | None) -> bool:
    """The same image: signed URLs differ in their query, not in their path."""
    return (a is None) == (b is None) and (a is None or urlsplit(a)[:3] == urlsplit(b)[:3])


class LumaProvider(DetailErrors, HttpProvider):
    name = "luma"
    api_version = API_VERSION
    default_base_url = "https://api.lumalabs.ai/dream-machine/v1"
    emulator_prefix = "luma/dream-machine/v1"
    default_prices = {"ray-2": 0.142, "ray-flash-2": 0.048}
    cancel_semantics = "none: a cancelled generation is followed until it ends (billed if it completed)"
    check_path = "/credits"
    base_capabilities = Capabilities(
        webhooks=False, cancel=False, reconcile_by_request_key=False, reconcile_by_list=True,
        aspect_ratios=["9:16", "16:9", "1:1"], min_duration_s=5, max_duration_s=9, durations_s=[5.0, 9.0],
        min_poll_interval_s=3.0, output_domains=["storage.cdn-luma.com"], acceptance_window_s=60.0,
    )

    def _body(self, request: GenerationRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"model": request.model, "prompt": request.prompt, "aspect_ratio": request.aspect_ratio,
                                "duration": f"{int(request.duration_s)}s", "resolution": "720p"}
        if request.image_url:
            body["keyframes"] = {"frame0": {"type": "image", "url": request.image_url}}
        return body

    def submit(self, request: GenerationRequest) -> SubmitResult:
        sent = self._send_submit(request.request_key, "POST", "/generations/video", json=self._body(request))
        return sent if isinstance(sent, SubmitResult) else self._submit_answer(request.request_key, sent)

    def get_job(self, job_id: str) -> JobState:
        return self._state(self._generation(self._call("GET", f"/generations/{job_id}")))

    def cancel(self, job_id: str) -> JobState:
        return self.get_job(job_id)  # no cancel at Luma (capabilities.cancel is False)

    def find_by_request_key(self, request_key: str) -> list[JobState]:
        raise ProviderError("luma keeps no id of ours: reconcile with find_by_request", retryable=False)

    def find_by_request(self, request: GenerationRequest, sent_at: datetime) -> list[JobState]:
        """Generations created since `sent_at` (less clock skew) whose echoed request is ours."""
        wanted, since = self._body(request), sent_at - CLOCK_SKEW
        found: list[LumaGeneration] = []
        for page in range(MAX_PAGES):
            body = self._call("GET", "/generations", params={"limit": PAGE, "offset": page * PAGE})
            batch = [self._generation(g) for g in body.get("generations", [])]
            found += [g for g in batch if g.created_at >= since and self._matches(g.request or {}, wanted)]
            if not body.get("has_more") or not batch or min(g.created_at for g in batch) < since:
                break
        return [self._state(g) for g in sorted(found, key=lambda g: g.created_at)]

    @staticmethod
    def _matches(echoed: dict[str, Any], wanted: dict[str, Any]) -> bool:
        fields = ("model", "prompt", "aspect_ratio", "duration")
        frame = (echoed.get("keyframes") or {}).get("frame0") or {}
        return (all(echoed.get(f) == wanted[f] for f in fields)
                and _same_image(frame.get("url"), ((wanted.get("keyframes") or {}).get("frame0") or {}).get("url")))

    def billed(self, state: JobState) -> bool:
        return state.status is JobStatus.SUCCEEDED

    def _generation(self, body: Any) -> LumaGeneration:
        try:
            return LumaGeneration.model_validate(body)
        except ValidationError as exc:
            raise ProviderError(f"unexpected luma generation: {exc.errors()[:2]}", retryable=False) from exc

    def _state(self, g: LumaGeneration) -> JobState:
        failed = g.state == "failed"
        reason = g.failure_reason or "generation failed"
        video = (g.assets or {}).get("video")
        return JobState(
            provider=self.name, job_id=g.id, status=STATUS[g.state], raw_status=g.state,
            progress=1.0 if g.state == "completed" else None,
            outputs=[OutputRef(url=video, content_type="video/mp4")] if video and g.state == "completed" else [],
            error_class=(ErrorClass.MODERATION if "moderation" in reason.lower() else ErrorClass.RETRYABLE)
            if failed else None,
            error_message=self.scrub(reason) if failed else None, updated_at=g.created_at,
        )

    def _refusal_class(self, status: int, body: Any) -> ErrorClass | None:
        detail = self._error_text(body).lower()
        return ErrorClass.MODERATION if status == 400 and "moderation" in detail else None
