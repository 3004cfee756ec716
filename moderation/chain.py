"""The chain of moderators a subject passes: the platform's, overridable per tenant plan within
what the operator allows.

The operator names the moderators in order and which of them are required (all, unless said).
A tenant's override may reorder, add available moderators and tighten (`review_is_block`), never
drop a required one: a tenant is an adversary, and a chain that let it skip the text policy would
be no chain.

Running: each moderator that judges the subject's kind, in order; the most severe verdict wins
and a `block` ends the run (nothing after it can change the outcome). A moderator's retryable
error stops the run with ModerationDeferred: content is never let through unjudged, the caller
waits and asks again. A final error is that moderator's `review` (a person decides). A subject
no moderator of the chain judges is `review` too, for the same reason.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from contracts.moderation import (
    Evidence,
    FramesSubject,
    ImageSubject,
    Judgement,
    Moderator,
    ModeratorError,
    TextSubject,
    Verdict,
    most_severe,
)

CHAIN = "chain"  # the moderator name of the chain's own judgement on a subject nobody judged


class ChainPolicy(BaseModel):
    """The operator's chain: moderator names in order; `required` None means all of them."""

    model_config = ConfigDict(frozen=True)

    moderators: tuple[str, ...] = Field(min_length=1)
    required: frozenset[str] | None = None

    def must_run(self) -> frozenset[str]:
        return frozenset(self.moderators) if self.required is None else self.required


class TenantChain(BaseModel):
    """A tenant plan's override: its own order (None: the platform's) and `review_is_block`."""

    model_config = ConfigDict(frozen=True)

    moderators: tuple[str, ...] | None = None
    review_is_block: bool = False


class ChainRefused(ValueError):
    """A chain the operator's policy does not allow (a required moderator dropped, an unknown one)."""


class ModerationDeferred(Exception):
    """A moderator could not judge now; ask again after `retry_after_s` (None: by the caller's policy).
    `judged`: the judgements made before it (the record keeps them)."""

    def __init__(self, moderator: str, error: ModeratorError, judged: list[Judgement]):
        super().__init__(f"{moderator}: {error}")
        self.moderator = moderator
        self.retry_after_s = error.retry_after_s
        self.judged = judged


class ChainResult(BaseModel):
    verdict: Verdict
    judgements: list[Judgement]


class ModerationChain:
    def __init__(self, moderators: Sequence[Moderator], *, review_is_block: bool = False):
        self.moderators = list(moderators)
        self.review_is_block = review_is_block

    def judge(self, subject: TextSubject | ImageSubject | FramesSubject) -> ChainResult:
        judgements: list[Judgement] = []
        for moderator in self.moderators:
            if subject.kind not in moderator.kinds:
                continue
            started = time.perf_counter()
            try:
                judgement = moderator.judge(subject)
            except ModeratorError as exc:
                if exc.retryable:
                    raise ModerationDeferred(moderator.name, exc, judgements) from exc
                judgement = _unjudged(moderator.name, subject.kind, "moderator_error", str(exc)[:500], started)
            judgements.append(judgement)
            if judgement.verdict is Verdict.BLOCK:
                break
        if not judgements:
            judgements.append(_unjudged(CHAIN, subject.kind, "unjudged", "no moderator of the chain judges "
                                        f"{subject.kind}", time.perf_counter()))
        verdict = most_severe(j.verdict for j in judgements)
        if verdict is Verdict.REVIEW and self.review_is_block:
            verdict = Verdict.BLOCK
        return ChainResult(verdict=verdict, judgements=judgements)


def build_chain(policy: ChainPolicy, available: Mapping[str, Moderator],
                tenant: TenantChain | None = None) -> ModerationChain:
    """The chain for one tenant: the platform's, or the tenant's override once checked against it."""
    names = policy.moderators if tenant is None or tenant.moderators is None else tenant.moderators
    unknown = [n for n in (*policy.moderators, *names) if n not in available]
    if unknown:
        raise ChainRefused(f"unknown moderators: {', '.join(sorted(set(unknown)))}")
    dropped = policy.must_run() - set(names)
    if dropped:
        raise ChainRefused(f"the operator requires {', '.join(sorted(dropped))}: a tenant plan may not drop it")
    if len(set(names)) != len(names):
        raise ChainRefused("a moderator is named twice")
    return ModerationChain([available[n] for n in names], review_is_block=bool(tenant and tenant.review_is_block))


def _unjudged(moderator: str, kind: str, category: str, note: str, started: float) -> Judgement:
    """A `review` in place of a judgement that could not be made."""
    return Judgement(verdict=Verdict.REVIEW, moderator=moderator, model_version="none", subject_kind=kind,
                     categories=(category,), evidence=Evidence(note=note),
                     latency_ms=(time.perf_counter() - started) * 1000)
