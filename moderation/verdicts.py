"""From scores to a Judgement, shared by the moderators that score images (OpenAI, Rekognition, the
local classifier): per category a review and a block threshold, per frame the most severe, the
flagged frames' times as evidence. One rule for all, so a threshold means the same everywhere."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from contracts.moderation import Evidence, Judgement, SubjectKind, Verdict, most_severe


class Threshold(BaseModel):
    """Scores 0..1: at or over `block` blocks, at or over `review` goes to a person."""

    model_config = ConfigDict(frozen=True)

    review: float = Field(ge=0, le=1)
    block: float = Field(ge=0, le=1)


def category_verdict(score: float, limits: Threshold, *, marked: bool = False) -> Verdict:
    """`marked`: the moderator itself flagged the category (at least review, whatever our thresholds)."""
    if score >= limits.block:
        return Verdict.BLOCK
    if score >= limits.review or marked:
        return Verdict.REVIEW
    return Verdict.ALLOW


class Scored(BaseModel):
    """One image's (or frame's) answer: category -> score and the verdict our thresholds give it."""

    at_s: float | None = None  # the frame's time; None for a single image
    scores: dict[str, float] = Field(default_factory=dict)
    verdicts: dict[str, Verdict] = Field(default_factory=dict)  # only categories judged review or block


def judgement_of(moderator: str, model_version: str, kind: SubjectKind, answers: Sequence[Scored],
                 latency_ms: float, note: str | None = None) -> Judgement:
    """The most severe verdict over every image; scores kept at their highest; a frame is evidence
    when any of its categories reached review."""
    scores: dict[str, float] = {}
    verdicts: dict[str, Verdict] = {}
    for answer in answers:
        for category, score in answer.scores.items():
            scores[category] = max(scores.get(category, 0.0), score)
        for category, verdict in answer.verdicts.items():
            verdicts[category] = most_severe([verdict, verdicts.get(category, Verdict.ALLOW)])
    flagged = tuple(a.at_s for a in answers if a.at_s is not None and a.verdicts)
    return Judgement(verdict=most_severe(verdicts.values()), moderator=moderator, model_version=model_version,
                     subject_kind=kind, categories=tuple(sorted(verdicts)), scores=scores,
                     evidence=Evidence(frames_s=flagged, note=note), latency_ms=latency_ms)
