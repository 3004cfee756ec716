"""The moderation vocabulary every layer will share: what is judged (a Subject), where (a Gate), the
answer (a Judgement with its Verdict) and the Moderator protocol that gives it.

A moderator judges one subject and answers a Judgement, or raises ModeratorError: `retryable`
when asking again may help (a rate limit, an outage; content is then never let through unjudged),
final when it will not (the chain turns that into `review`, a person decides). Verdicts order by
severity, block > review > allow: whatever combines judgements keeps the most severe.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Annotated, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field


class Verdict(StrEnum):
    ALLOW = "allow"
    REVIEW = "review"  # a person decides before anything goes on
    BLOCK = "block"  # a business failure: never retried


SEVERITY: dict[Verdict, int] = {Verdict.ALLOW: 0, Verdict.REVIEW: 1, Verdict.BLOCK: 2}


def most_severe(verdicts: Iterable[Verdict]) -> Verdict:
    """The most severe of `verdicts` (block > review > allow); allow when there are none."""
    return max(verdicts, key=SEVERITY.__getitem__, default=Verdict.ALLOW)


class Gate(StrEnum):
    """Where content is judged; `provider` records a provider's own refusal in the same history."""

    INPUT = "input"  # the rendered prompt and reference media, before credit is reserved
    UPLOAD = "upload"  # a tenant's upload, before it is READY
    OUTPUT = "output"  # the fetched video's frames, before SUCCEEDED
    PROVIDER = "provider"


# An image is an https URL or a `data:` URI; video frames are images with their time in the video.
MAX_FRAMES = 600


class TextSubject(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: Literal["text"] = "text"
    text: str


class ImageSubject(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: Literal["image"] = "image"
    url: str = Field(min_length=1)  # https URL or data URI


class Frame(BaseModel):
    model_config = ConfigDict(frozen=True)

    at_s: float = Field(ge=0)
    url: str = Field(min_length=1)  # https URL or data URI of the frame as a still


class FramesSubject(BaseModel):
    """Sampled frames of one video (keyframes, scene cuts, about one a second)."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["video_frames"] = "video_frames"
    frames: tuple[Frame, ...] = Field(min_length=1, max_length=MAX_FRAMES)


Subject = Annotated[TextSubject | ImageSubject | FramesSubject, Field(discriminator="kind")]
SubjectKind = Literal["text", "image", "video_frames"]


class TermMatch(BaseModel):
    model_config = ConfigDict(frozen=True)

    list: str  # "platform:illicit", "tenant:brand-safety"
    term: str  # as written in the list


class Evidence(BaseModel):
    """Why a moderator answered as it did: terms matched, frames flagged, a short note."""

    model_config = ConfigDict(frozen=True)

    terms: tuple[TermMatch, ...] = ()
    frames_s: tuple[float, ...] = ()  # times of the frames that drove the verdict
    note: str | None = Field(default=None, max_length=500)


class Judgement(BaseModel):
    """One moderator's answer on one subject: what the record of judgements keeps."""

    model_config = ConfigDict(frozen=True)

    verdict: Verdict
    moderator: str
    model_version: str
    subject_kind: SubjectKind
    categories: tuple[str, ...] = ()  # those that drove a review or block
    scores: dict[str, float] = Field(default_factory=dict)  # category -> 0..1, as the moderator reports
    evidence: Evidence = Field(default_factory=Evidence)
    latency_ms: float = Field(default=0.0, ge=0)


class ModeratorError(Exception):
    """A moderator could not judge. `retryable`: asking again later may help (`retry_after_s`
    when the moderator said how long to wait); final: it will not, a person must decide."""

    def __init__(self, message: str, *, retryable: bool, retry_after_s: float | None = None,
                 http_status: int | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.retry_after_s = retry_after_s
        self.http_status = http_status


@runtime_checkable
class Moderator(Protocol):
    """One moderator (a policy, a local classifier, a hosted API). Never retries on its own."""

    name: str
    kinds: frozenset[str]  # the subject kinds it judges; the chain passes it no others

    def judge(self, subject: TextSubject | ImageSubject | FramesSubject) -> Judgement:
        """A Judgement; raises ModeratorError when it cannot judge."""
