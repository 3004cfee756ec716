"""Kling AI's API v1 (api-singapore.klingai.com): image-to-video tasks (`/v1/videos/image2video`).

Kling has no official Python SDK; httpx with PyJWT for its auth. Field names, codes and
examples from Kling's API reference (app.klingai.com/global/dev/document-api), as transcribed in
the contract fixtures' sources.

- auth: a JWT (HS256) per call, `iss` = access key (REELQUEUE_KLING_API_KEY), signed with the secret
  key (REELQUEUE_KLING_SECRET_KEY), valid 30 minutes; made afresh before it expires.
- submit: `POST /v1/videos/image2video` with `model_name`, `image` (URL), `prompt` (<= 2500),
  `mode` std, `duration` "5" or "10", `aspect_ratio`, and `external_task_id` = our request key
  (unique per account: task id + attempt number).
- answers: `{code, message, request_id, data}`; code 0 is success. 1301 = content refused
  (moderation), 1302 = requests too fast, 1303 = concurrent tasks over the plan (both retryable:
  rate limits; Kling sends no Retry-After, so the workflow's backoff applies), 1000-1004 auth,
  1100-1102 account or balance (final), 5000-5002 server (retryable).
- status: `submitted processing succeed failed`; `task_status_msg` says why it failed (content
  moderation / risk control = moderation).
- reconcile: by our own id: `GET /v1/videos/image2video?external_task_id=...`.
- cancel: Kling offers none; a cancelled task is followed until it ends (and billed if it
  succeeded). Failed tasks are not charged.
- cost: no usage in the answer: the price table (USD per second of std-mode video; set yours in
  REELQUEUE_KLING_PRICES).
- outputs: `task_result.videos[].url`, kept 30 days. Callbacks are unsigned, so none are asked
  for: status comes from polling.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import jwt
from pydantic import BaseModel, ConfigDict, ValidationError

from adapters.providers.base import Capabilities, GenerationRequest, JobState, OutputRef, ProviderError, SubmitResult
from adapters.providers.http import HttpProvider, ProviderConfig
from contracts.provider import ErrorClass, JobStatus, SubmitOutcome

API_VERSION = "v1"
TOKEN_TTL_S = 1800
KlingStatus = Literal["submitted", "processing", "succeed", "failed"]
STATUS = {"submitted": JobStatus.QUEUED, "processing": JobStatus.RUNNING, "succeed": JobStatus.SUCCEEDED,
          "failed": JobStatus.FAILED}
OUTPUT_TTL = timedelta(days=30)
_MODERATION_WORDS = ("moderation", "risk control", "content security", "sensitive")
NOT_FOUND_CODE = 1203  # the requested resource does not exist


def code_class(code: int) -> ErrorClass | None:
    """Kling's answer codes to our classes; None: not a known refusal code."""
    if code == 1301:
        return ErrorClass.MODERATION
    if code in (1302, 1303) or 5000 <= code <= 5002:
        return ErrorClass.RETRYABLE
    if 1000 <= code <= 1304:
        return ErrorClass.NON_RETRYABLE
    return None


class KlingVideo(BaseModel):
    id: str | None = None
    url: str
    duration: str | None = None


class KlingTask(BaseModel):
    model_config = ConfigDict(extra="ignore")

    task_id: str
    task_status: KlingStatus
    task_status_msg: str | None = None
    task_info: dict[str, Any] | None = None
    task_result: dict[str, list[KlingVideo]] | None = None
    created_at: int
    updated_at: int


class KlingProvider(HttpProvider):
    name = "kling"
    api_version = API_VERSION
    default_base_url = "https://api-singapore.klingai.com"
    emulator_prefix = "kling"
    default_prices = {"kling-v1-6": 0.028, "kling-v2-1": 0.056}
    cancel_semantics = "none offered: a cancelled task is followed until it ends (billed if it succeeded)"
    check_path = "/v1/videos/image2video?pageNum=1&pageSize=1"
    base_capabilities = Capabilities(
        webhooks=False, cancel=False, reconcile_by_request_key=True, reconcile_by_list=False,
        aspect_ratios=["9:16", "16:9", "1:1"], min_duration_s=5, max_duration_s=10, durations_s=[5.0, 10.0],
        min_poll_interval_s=3.0, output_domains=["p1.a.kwimgs.com", "v1-kling.kechuangai.com"],
        output_ttl_s=OUTPUT_TTL.total_seconds(), acceptance_window_s=60.0,
    )

    def __init__(self, config: ProviderConfig):
        self._token: tuple[str, float] | None = None
        super().__init__(config)

    @property
    def missing_setting(self) -> str | None:
        if not self.config.api_key.get_secret_value():
            return f"{self.config.env_prefix}_API_KEY"
        return None if self.config.extra_secret.get_secret_value() else f"{self.config.env_prefix}_SECRET_KEY"

    def _auth_headers(self) -> dict[str, str]:
        return {}  # a fresh JWT per call (`_bearer`)

    def _bearer(self) -> dict[str, str]:
        now = time.time()
        if self._token is None or self._token[1] - now < 60:
            claims = {"iss": self.config.api_key.get_secret_value(), "exp": int(now) + TOKEN_TTL_S,
                      "nbf": int(now) - 5}
            token = jwt.encode(claims, self.config.extra_secret.get_secret_value() or "-", algorithm="HS256",
                               headers={"typ": "JWT"})
            self._token = (token, now + TOKEN_TTL_S)
        return {"Authorization": f"Bearer {self._token[0]}"}

    def scrub(self, text: str) -> str:
        text = super().scrub(text)
        return text.replace(self._token[0], "***") if self._token else text

    def check(self):  # noqa: ANN201 - CheckResult
        self._client.headers.update(self._bearer())
        return super().check()

    def submit(self, request: GenerationRequest) -> SubmitResult:
        body = {
            "model_name": request.model, "prompt": request.prompt[:2500], "mode": "std",
            "duration": str(int(request.duration_s)), "aspect_ratio": request.aspect_ratio,
            "external_task_id": request.request_key, **({"image": request.image_url} if request.image_url else {}),
        }
        if not request.image_url:
            return self._result(request.request_key, SubmitOutcome.REJECTED_FINAL, ErrorClass.NON_RETRYABLE,
                                "kling image2video needs a product image")
        sent = self._send_submit(request.request_key, "POST", "/v1/videos/image2video", json=body,
                                 headers=self._bearer())
        if isinstance(sent, SubmitResult):
            return sent
        answer = sent.json() if sent.is_success and sent.content else None
        if isinstance(answer, dict) and answer.get("code") not in (0, None):  # refused in a 200
            refusal = code_class(int(answer["code"])) or ErrorClass.NON_RETRYABLE
            return self._refused(request.request_key, refusal, self._error_text(answer), http_status=sent.status_code)
        return self._submit_answer(request.request_key, sent)

    def get_job(self, job_id: str) -> JobState:
        return self._state(self._task(self._call("GET", f"/v1/videos/image2video/{job_id}", headers=self._bearer())))

    def cancel(self, job_id: str) -> JobState:
        return self.get_job(job_id)  # no cancel at Kling (capabilities.cancel is False)

    def find_by_request_key(self, request_key: str) -> list[JobState]:
        try:
            body = self._call("GET", "/v1/videos/image2video", params={"external_task_id": request_key},
                              headers=self._bearer())
        except ProviderError as exc:
            if exc.http_status == 404 or f"code {NOT_FOUND_CODE}" in str(exc):
                return []
            raise
        data = body.get("data") if isinstance(body, dict) else None
        tasks = data if isinstance(data, list) else [data] if data else []
        found = [self._task({"code": 0, "data": t}) for t in tasks]
        mine = [t for t in found if (t.task_info or {}).get("external_task_id") == request_key]
        return [self._state(t) for t in sorted(mine, key=lambda t: t.created_at)]

    def billed(self, state: JobState) -> bool:
        return state.status is JobStatus.SUCCEEDED

    def _task(self, body: Any) -> KlingTask:
        try:
            return KlingTask.model_validate(body["data"])
        except (ValidationError, KeyError, TypeError) as exc:
            raise ProviderError(f"unexpected kling task: {str(exc)[:300]}", retryable=False) from exc

    def _state(self, task: KlingTask) -> JobState:
        failed = task.task_status == "failed"
        message = task.task_status_msg or "task failed"
        moderated = failed and any(word in message.lower() for word in _MODERATION_WORDS)
        updated = datetime.fromtimestamp(task.updated_at / 1000, UTC)
        videos = (task.task_result or {}).get("videos", [])
        return JobState(
            provider=self.name, job_id=task.task_id, request_key=(task.task_info or {}).get("external_task_id"),
            status=STATUS[task.task_status], raw_status=task.task_status,
            progress=1.0 if task.task_status == "succeed" else None,
            outputs=[OutputRef(url=v.url, expires_at=updated + OUTPUT_TTL, content_type="video/mp4") for v in videos],
            error_class=(ErrorClass.MODERATION if moderated else ErrorClass.RETRYABLE) if failed else None,
            error_message=self.scrub(message) if failed else None, updated_at=updated,
        )

    def _job_id(self, body: Any) -> str | None:
        data = body.get("data") if isinstance(body, dict) else None
        job_id = data.get("task_id") if isinstance(data, dict) else None
        return job_id if isinstance(job_id, str) and job_id else None

    def _error_text(self, body: Any) -> str:
        if isinstance(body, dict) and "code" in body:
            return f"code {body['code']}: {body.get('message', '')}"
        return str(body)[:300]

    def _provider_shaped(self, body: Any) -> bool:
        return isinstance(body, dict) and isinstance(body.get("code"), int)

    def _refusal_class(self, status: int, body: Any) -> ErrorClass | None:
        code = body.get("code") if isinstance(body, dict) else None
        return code_class(code) if isinstance(code, int) else None
