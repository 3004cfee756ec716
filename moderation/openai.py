"""OpenAI's moderation endpoint, `POST /v1/moderations` with `omni-moderation-latest`, as a Moderator.

- request: `{"model", "input"}`: a text as a string; an image as one `image_url` part (an https URL
  or a data URI, at most 20 MB, the API's limit); video frames one request per frame (the API takes
  no video), the verdict the most severe, the flagged frames' times as evidence.
- answer: `results[]` with `flagged`, `categories` (name -> bool), `category_scores` (name -> 0..1),
  `category_applied_input_types` (name -> ["text", "image"]); images are scored only for sexual,
  violence and self-harm. `model` names the version that judged.
- verdict: a category's score at or over its `block` threshold blocks, at or over `review` sends to
  review (THRESHOLDS, per category, merged with the configured ones); a category the API marks true
  is at least `review`, whatever our thresholds say.
- errors: 408, 429 and 5xx are retryable with `Retry-After` / `retry-after-ms` honoured, as is a
  failed connection (the call changes nothing, so asking again is always safe); other 4xx are
  final, as is an answer we cannot read or one over `max_response_bytes`. A request over its
  caps is refused before it is sent.
- the key: configuration only (no usable default); an unconfigured moderator refuses every call
  (final: a person decides, nothing passes). No message carries it.
httpx directly, like the provider adapters (adapters/providers/http.py), never an SDK's retry loop.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from adapters.providers.http import retry_after, retryable_status
from contracts.moderation import (
    FramesSubject,
    ImageSubject,
    Judgement,
    ModeratorError,
    TextSubject,
    Verdict,
    most_severe,
)
from moderation.http import scrub, send_capped
from moderation.verdicts import Scored, Threshold, category_verdict, judgement_of

DATA_URI_MAX_BYTES = 20 * 1024 * 1024  # the API's limit on one image part


DEFAULT_THRESHOLD = Threshold(review=0.5, block=0.8)
# Stricter where a miss costs most; every other category takes DEFAULT_THRESHOLD.
THRESHOLDS: dict[str, Threshold] = {
    "sexual/minors": Threshold(review=0.05, block=0.2),
    "self-harm/intent": Threshold(review=0.3, block=0.6),
    "self-harm/instructions": Threshold(review=0.3, block=0.6),
    "hate/threatening": Threshold(review=0.3, block=0.7),
    "harassment/threatening": Threshold(review=0.3, block=0.7),
    "illicit/violent": Threshold(review=0.3, block=0.7),
    "violence/graphic": Threshold(review=0.4, block=0.7),
}


class OpenAIModerationConfig(BaseModel):
    api_key: SecretStr = SecretStr("")
    base_url: str = "https://api.openai.com"
    model: str = "omni-moderation-latest"
    thresholds: dict[str, Threshold] = Field(default_factory=dict)  # merged over THRESHOLDS
    timeout_s: float = 10.0
    max_text_chars: int = 20_000
    max_image_bytes: int = Field(default=DATA_URI_MAX_BYTES, le=DATA_URI_MAX_BYTES)  # a data URI's length
    max_response_bytes: int = 256 * 1024


class ModerationResult(BaseModel):
    """One entry of `results` (the SDK's `Moderation`)."""

    model_config = ConfigDict(extra="ignore")

    flagged: bool
    categories: dict[str, bool]
    category_scores: dict[str, float]
    category_applied_input_types: dict[str, list[str]] = Field(default_factory=dict)


class ModerationResponse(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str
    model: str
    results: list[ModerationResult] = Field(min_length=1)


class OpenAIModerator:
    name = "openai"
    kinds = frozenset({"text", "image", "video_frames"})
    emulator_prefix = "openai"

    def __init__(self, config: OpenAIModerationConfig):
        self.config = config
        self.thresholds = {**THRESHOLDS, **config.thresholds}
        self._client = httpx.Client(base_url=config.base_url.rstrip("/"), timeout=config.timeout_s,
                                    headers=self._auth_headers())

    def _auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.config.api_key.get_secret_value()}"}

    def close(self) -> None:
        self._client.close()

    def judge(self, subject: TextSubject | ImageSubject | FramesSubject) -> Judgement:
        if not self.config.api_key.get_secret_value():
            raise ModeratorError("openai moderation: no API key configured", retryable=False)
        started = time.perf_counter()
        if isinstance(subject, TextSubject):
            if len(subject.text) > self.config.max_text_chars:
                raise ModeratorError(f"text over {self.config.max_text_chars} characters: not sent", retryable=False)
            answers = [(None, self._moderate(subject.text))]
        elif isinstance(subject, ImageSubject):
            answers = [(None, self._moderate([self._image_part(subject.url)]))]
        else:
            parts = [(f.at_s, [self._image_part(f.url)]) for f in subject.frames]  # all checked before any is sent
            answers = [(at_s, self._moderate(part)) for at_s, part in parts]
        return self._judgement(subject.kind, answers, (time.perf_counter() - started) * 1000)

    def _image_part(self, url: str) -> dict[str, Any]:
        if url.startswith("data:"):
            if len(url) > self.config.max_image_bytes:
                raise ModeratorError(f"image data URI over {self.config.max_image_bytes} bytes: not sent",
                                     retryable=False)
        elif not url.startswith("https://") and not url.startswith("http://"):
            raise ModeratorError("an image is an http(s) URL or a data URI", retryable=False)
        return {"type": "image_url", "image_url": {"url": url}}

    def _moderate(self, payload: str | list[dict[str, Any]]) -> ModerationResponse:
        body = json.dumps({"model": self.config.model, "input": payload}).encode()
        request = self._client.build_request("POST", "/v1/moderations", content=body,
                                             headers={"Content-Type": "application/json"})
        resp, raw = send_capped(self._client, request, self.config.max_response_bytes, "openai moderation",
                                self._scrub)
        if resp.is_error:
            raise ModeratorError(self._scrub(f"openai moderation: HTTP {resp.status_code} {_error_text(raw)}"),
                                 retryable=retryable_status(resp.status_code),
                                 retry_after_s=retry_after(resp.headers), http_status=resp.status_code)
        try:
            return ModerationResponse.model_validate_json(raw)
        except ValidationError as exc:
            raise ModeratorError(f"openai moderation: unreadable answer: {exc.errors()[:2]}", retryable=False) from exc

    def _judgement(self, kind: str, answers: list[tuple[float | None, ModerationResponse]],
                   latency_ms: float) -> Judgement:
        scored: list[Scored] = []
        applied: dict[str, set[str]] = {}
        for at_s, answer in answers:
            frame = Scored(at_s=at_s)
            for result in answer.results:
                for category, score in result.category_scores.items():
                    frame.scores[category] = max(frame.scores.get(category, 0.0), score)
                    verdict = self._category_verdict(category, score, result.categories.get(category, False))
                    if verdict is not Verdict.ALLOW:
                        frame.verdicts[category] = most_severe([verdict, frame.verdicts.get(category, verdict)])
                        types = result.category_applied_input_types.get(category, [])
                        applied.setdefault(category, set()).update(types)
            scored.append(frame)
        note = "; ".join(f"{c}: {', '.join(sorted(t))}" for c, t in sorted(applied.items()) if t) or None
        return judgement_of(self.name, answers[0][1].model, kind, scored, latency_ms, note)

    def _category_verdict(self, category: str, score: float, marked: bool) -> Verdict:
        return category_verdict(score, self.thresholds.get(category, DEFAULT_THRESHOLD), marked=marked)

    def _scrub(self, text: str) -> str:
        return scrub(text, self.config.api_key.get_secret_value())


def _error_text(raw: bytes) -> str:
    """OpenAI's errors are `{"error": {"message", "type", "code"}}`."""
    try:
        error = json.loads(raw).get("error")
    except (ValueError, AttributeError):
        return raw[:300].decode(errors="replace")
    message = error.get("message") if isinstance(error, dict) else None
    return str(message or error)[:300]
