"""AWS Rekognition's `DetectModerationLabels` (image bytes) as a Moderator.

- request: `POST /` with `X-Amz-Target: RekognitionService.DetectModerationLabels`, JSON 1.1 body
  `{"Image": {"Bytes": base64}, "MinConfidence": N}`, signed with SigV4 (adapters/aws_sigv4.py).
  JPEG or PNG only, at most 5 MB of bytes (the API's limit for `Image.Bytes`): anything else is
  refused before it is sent. Video frames: one request per frame, like the OpenAI moderator.
- answer: `ModerationLabels[]` with `Name`, `ParentName` ("" at the top), `TaxonomyLevel` (1..3)
  and `Confidence` (0..100, read as a score 0..1), and `ModerationModelVersion`.
- verdict: each label's score against the threshold of the label, else of its nearest ancestor
  named in THRESHOLDS or the configuration (walking `ParentName` through the answer's labels), else
  DEFAULT_THRESHOLD. Categories are label names, so the record keeps what Rekognition saw.
- errors: throttling (`ThrottlingException`, `ProvisionedThroughputExceededException`,
  `LimitExceededException`), `InternalServerError`, any 429 or 5xx, timeouts and lost connections
  are retryable (content is never let through unjudged: the chain defers); bad input
  (`InvalidImageFormatException`, `ImageTooLargeException`, `InvalidParameterException`) and
  refused credentials are final. AWS sends no `Retry-After`: the caller's policy decides the wait.
- credentials: configuration only, no usable default; unconfigured, every call is refused (final).
"""

from __future__ import annotations

import base64
import json
import time

import httpx
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

from adapters.aws_sigv4 import Credentials, sign_request
from adapters.providers.http import EMULATED_API_KEY, EMULATED_AWS_ACCESS_KEY_ID, retryable_status
from contracts.moderation import FramesSubject, ImageSubject, Judgement, ModeratorError, TextSubject, Verdict
from moderation.http import scrub, send_capped
from moderation.images import subject_images
from moderation.verdicts import Scored, Threshold, category_verdict, judgement_of

SERVICE = "rekognition"
TARGET = "RekognitionService.DetectModerationLabels"
CONTENT_TYPE = "application/x-amz-json-1.1"
IMAGE_BYTES_MAX = 5 * 1024 * 1024  # the API's limit on `Image.Bytes`
WHO = "rekognition moderation"

RETRYABLE_ERRORS = frozenset({"ThrottlingException", "ProvisionedThroughputExceededException",
                              "LimitExceededException", "InternalServerError", "ServiceUnavailableException",
                              "RequestTimeoutException"})

DEFAULT_THRESHOLD = Threshold(review=0.6, block=0.85)
# By top-level category of the moderation taxonomy (v7); a label takes its nearest ancestor's.
# Swimwear, alcohol and tobacco are ordinary products in a catalog: a person looks only when sure.
THRESHOLDS: dict[str, Threshold] = {
    "Explicit": Threshold(review=0.5, block=0.7),
    "Explicit Nudity": Threshold(review=0.5, block=0.7),  # the level-1 name before taxonomy v7
    "Violence": Threshold(review=0.5, block=0.8),
    "Visually Disturbing": Threshold(review=0.5, block=0.8),
    "Hate Symbols": Threshold(review=0.5, block=0.8),
    "Swimwear or Underwear": Threshold(review=0.95, block=1.0),
    "Alcohol": Threshold(review=0.95, block=1.0),
    "Drugs & Tobacco": Threshold(review=0.9, block=1.0),
    "Gambling": Threshold(review=0.9, block=1.0),
}


class RekognitionModerationConfig(BaseModel):
    access_key_id: str = ""
    secret_access_key: SecretStr = SecretStr("")
    session_token: SecretStr = SecretStr("")  # temporary credentials
    region: str = Field(default="us-east-1", pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")
    base_url: str | None = None  # default https://rekognition.{region}.amazonaws.com
    thresholds: dict[str, Threshold] = Field(default_factory=dict)  # merged over THRESHOLDS
    min_confidence: float = Field(default=50.0, ge=0, le=100)  # labels under it are not returned
    timeout_s: float = 10.0
    max_image_bytes: int = Field(default=IMAGE_BYTES_MAX, gt=0, le=IMAGE_BYTES_MAX)
    max_response_bytes: int = 256 * 1024

    @model_validator(mode="after")
    def _labels_we_act_on_are_returned(self) -> RekognitionModerationConfig:
        lowest = min(t.review for t in (*THRESHOLDS.values(), *self.thresholds.values(), DEFAULT_THRESHOLD))
        if self.min_confidence > lowest * 100:
            raise ValueError(f"min_confidence {self.min_confidence:g} hides labels at the lowest review "
                             f"threshold ({lowest:g})")
        return self

    @property
    def endpoint(self) -> str:
        return (self.base_url or f"https://rekognition.{self.region}.amazonaws.com").rstrip("/")

    @classmethod
    def emulated(cls, emulator_url: str) -> RekognitionModerationConfig:
        """The embedded stack's: the emulator's dialect with the credential it knows."""
        return cls(access_key_id=EMULATED_AWS_ACCESS_KEY_ID, secret_access_key=EMULATED_API_KEY,
                   base_url=f"{emulator_url.rstrip('/')}/{RekognitionModerator.emulator_prefix}")


class ModerationLabel(BaseModel):
    model_config = ConfigDict(extra="ignore")

    Name: str
    ParentName: str = ""
    TaxonomyLevel: int | None = None
    Confidence: float = Field(ge=0, le=100)


class ModerationLabelsResponse(BaseModel):
    model_config = ConfigDict(extra="ignore")

    ModerationLabels: list[ModerationLabel] = Field(default_factory=list)
    ModerationModelVersion: str


class RekognitionModerator:
    name = "rekognition"
    kinds = frozenset({"image", "video_frames"})
    emulator_prefix = "rekognition"

    def __init__(self, config: RekognitionModerationConfig):
        self.config = config
        self.thresholds = {**THRESHOLDS, **config.thresholds}
        self._credentials = Credentials(access_key_id=config.access_key_id,
                                        secret_access_key=config.secret_access_key.get_secret_value(),
                                        session_token=config.session_token.get_secret_value() or None)
        self._client = httpx.Client(base_url=config.endpoint, timeout=config.timeout_s)

    def close(self) -> None:
        self._client.close()

    def judge(self, subject: TextSubject | ImageSubject | FramesSubject) -> Judgement:
        if isinstance(subject, TextSubject):
            raise ModeratorError(f"{WHO} judges images, not text", retryable=False)
        if not (self.config.access_key_id and self.config.secret_access_key.get_secret_value()):
            raise ModeratorError(f"{WHO}: no AWS credentials configured", retryable=False)
        started = time.perf_counter()
        images = subject_images(subject, self.config.max_image_bytes, WHO)  # all checked before any is sent
        answers = [(at_s, self._detect(data)) for at_s, data in images]
        return judgement_of(self.name, answers[0][1].ModerationModelVersion, subject.kind,
                            [self._scored(at_s, answer) for at_s, answer in answers],
                            (time.perf_counter() - started) * 1000, _note(answers))

    def _detect(self, image: bytes) -> ModerationLabelsResponse:
        body = json.dumps({"Image": {"Bytes": base64.b64encode(image).decode()},
                           "MinConfidence": self.config.min_confidence}).encode()
        request = self._client.build_request("POST", "/", content=body,
                                             headers={"Content-Type": CONTENT_TYPE, "X-Amz-Target": TARGET})
        sign_request(request, self._credentials, self.config.region, SERVICE)
        resp, raw = send_capped(self._client, request, self.config.max_response_bytes, WHO, self._scrub)
        if resp.is_error:
            kind, message = error_of(resp, raw)
            retryable = kind in RETRYABLE_ERRORS or retryable_status(resp.status_code)
            raise ModeratorError(self._scrub(f"{WHO}: HTTP {resp.status_code} {kind}: {message}"),
                                 retryable=retryable, http_status=resp.status_code)
        try:
            return ModerationLabelsResponse.model_validate_json(raw)
        except ValidationError as exc:
            raise ModeratorError(f"{WHO}: unreadable answer: {exc.errors()[:2]}", retryable=False) from exc

    def _scored(self, at_s: float | None, answer: ModerationLabelsResponse) -> Scored:
        parents = {label.Name: label.ParentName for label in answer.ModerationLabels}
        scored = Scored(at_s=at_s)
        for label in answer.ModerationLabels:
            score = label.Confidence / 100
            scored.scores[label.Name] = max(scored.scores.get(label.Name, 0.0), score)
            verdict = category_verdict(score, self._threshold(label.Name, label.ParentName, parents))
            if verdict is not Verdict.ALLOW:
                scored.verdicts[label.Name] = verdict
        return scored

    def _threshold(self, name: str, parent: str, parents: dict[str, str]) -> Threshold:
        """The label's own threshold, else its nearest ancestor's (at most three levels)."""
        seen: set[str] = set()
        while name and name not in seen:
            if name in self.thresholds:
                return self.thresholds[name]
            seen.add(name)
            name, parent = parent, parents.get(parent, "")
        return DEFAULT_THRESHOLD

    def _scrub(self, text: str) -> str:
        return scrub(text, self._credentials.secret_access_key, self._credentials.session_token or "")


def error_of(resp: httpx.Response, raw: bytes) -> tuple[str, str]:
    """(error type, message) of an AWS JSON error: `__type` (possibly `namespace#Name`) or the
    `x-amzn-ErrorType` header (`Name:url`), and `message` or `Message`."""
    try:
        body = json.loads(raw)
    except ValueError:
        body = {}
    body = body if isinstance(body, dict) else {}
    kind = str(body.get("__type") or resp.headers.get("x-amzn-errortype") or "").rpartition("#")[2].partition(":")[0]
    message = body.get("message") or body.get("Message") or raw[:300].decode(errors="replace")
    return kind or "UnknownError", str(message)[:300]


def _note(answers: list[tuple[float | None, ModerationLabelsResponse]]) -> str | None:
    """The taxonomy path of each label seen (`Violence > Graphic Violence`), for a reader of the record."""
    paths = sorted({f"{label.ParentName} > {label.Name}" if label.ParentName else label.Name
                    for _, answer in answers for label in answer.ModerationLabels})
    return "; ".join(paths)[:500] or None
