"""The emulator provider's HTTP contract (JSON bodies and limits): what EmulatorProvider sends and
reads. It lives with the adapter, like any provider's API description; the emulator (emulator/)
serves this same contract and imports it from here, so production code never depends on the
test emulator."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from adapters.media.transcode import PROXY_FRAME

MIN_DURATION_S = 1.0
MAX_DURATION_S = 10.0
ASPECT_RATIOS = list(PROXY_FRAME)

JobStatusName = Literal["queued", "throttled", "running", "succeeded", "failed", "canceled"]


class SubmitIn(BaseModel):
    request_key: str = Field(min_length=1, max_length=255)
    model: str = Field(min_length=1, max_length=100)
    prompt: str = Field(default="", max_length=2000)
    image_url: str | None = None
    aspect_ratio: str
    duration_s: float = Field(ge=MIN_DURATION_S, le=MAX_DURATION_S)
    overlay_lines: list[str] = Field(default_factory=list, max_length=8)
    webhook_url: str | None = None

    @field_validator("aspect_ratio")
    @classmethod
    def _known_ratio(cls, value: str) -> str:
        if value not in PROXY_FRAME:
            raise ValueError(f"aspect_ratio must be one of {ASPECT_RATIOS}")
        return value

    @field_validator("image_url", "webhook_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http(s) URL")
        return value


class OutputOut(BaseModel):
    url: str
    expires_at: datetime


class UsageOut(BaseModel):
    seconds: float
    cost: float


class ErrorOut(BaseModel):
    code: str
    message: str


class JobOut(BaseModel):
    id: str
    request_key: str
    model: str
    aspect_ratio: str
    duration_s: float
    status: JobStatusName
    progress: float = Field(ge=0, le=1)
    created_at: datetime
    updated_at: datetime
    output: list[OutputOut] | None = None
    usage: UsageOut | None = None
    error: ErrorOut | None = None


class JobList(BaseModel):
    """`GET /v1/jobs`: by request key (every job, oldest first), or a page of the jobs created at or
    after `created_after` (oldest first; `has_more` says to ask again with the next `offset`)."""

    data: list[JobOut]
    has_more: bool = False


LIST_PAGE_MAX = 100
