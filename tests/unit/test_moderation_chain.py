"""The chain: the most severe verdict wins, a block ends the run, a retryable error is raised (never
let through), a final one is a review; a tenant may add and tighten, never drop a required moderator."""

from __future__ import annotations

import pytest

from contracts.moderation import (
    Frame,
    FramesSubject,
    Judgement,
    ModeratorError,
    TextSubject,
    Verdict,
    most_severe,
)
from moderation.chain import ChainPolicy, ChainRefused, ModerationChain, ModerationDeferred, TenantChain, build_chain

TEXT = TextSubject(text="a lamp")


class Fixed:
    """A moderator answering one verdict (or raising one error), counting its calls."""

    def __init__(self, name: str, verdict: Verdict = Verdict.ALLOW, *, error: ModeratorError | None = None,
                 kinds: frozenset[str] = frozenset({"text", "image", "video_frames"})):
        self.name, self.verdict, self.error, self.kinds, self.calls = name, verdict, error, kinds, 0

    def judge(self, subject) -> Judgement:  # noqa: ANN001 - any subject
        self.calls += 1
        if self.error is not None:
            raise self.error
        return Judgement(verdict=self.verdict, moderator=self.name, model_version="1", subject_kind=subject.kind)


def test_severity_order():
    assert most_severe([Verdict.ALLOW, Verdict.BLOCK, Verdict.REVIEW]) is Verdict.BLOCK
    assert most_severe([Verdict.REVIEW, Verdict.ALLOW]) is Verdict.REVIEW
    assert most_severe([]) is Verdict.ALLOW


def test_the_most_severe_wins_and_every_judgement_is_returned():
    result = ModerationChain([Fixed("a"), Fixed("b", Verdict.REVIEW), Fixed("c")]).judge(TEXT)
    assert result.verdict is Verdict.REVIEW and [j.moderator for j in result.judgements] == ["a", "b", "c"]


def test_a_block_short_circuits():
    after = Fixed("after")
    result = ModerationChain([Fixed("a", Verdict.REVIEW), Fixed("b", Verdict.BLOCK), after]).judge(TEXT)
    assert result.verdict is Verdict.BLOCK and after.calls == 0 and len(result.judgements) == 2


def test_a_retryable_error_is_raised_with_the_judgements_so_far():
    after = Fixed("after")
    chain = ModerationChain([Fixed("a"), Fixed("hosted", error=ModeratorError("429", retryable=True,
                                                                              retry_after_s=2.0)), after])
    with pytest.raises(ModerationDeferred) as raised:
        chain.judge(TEXT)
    assert raised.value.moderator == "hosted" and raised.value.retry_after_s == 2.0
    assert [j.moderator for j in raised.value.judged] == ["a"] and after.calls == 0


def test_a_final_error_is_that_moderators_review():
    result = ModerationChain([Fixed("hosted", error=ModeratorError("HTTP 400 bad image", retryable=False)),
                              Fixed("b")]).judge(TEXT)
    assert result.verdict is Verdict.REVIEW
    failed = result.judgements[0]
    assert (failed.moderator, failed.verdict, failed.categories) == ("hosted", Verdict.REVIEW, ("moderator_error",))
    assert "bad image" in failed.evidence.note


def test_moderators_judge_only_their_kinds_and_nothing_passes_unjudged():
    text_only = Fixed("text_policy", Verdict.BLOCK, kinds=frozenset({"text"}))
    frames = FramesSubject(frames=(Frame(at_s=0, url="https://cdn.test/0.jpg"),))
    result = ModerationChain([text_only]).judge(frames)
    assert text_only.calls == 0
    assert result.verdict is Verdict.REVIEW and result.judgements[0].categories == ("unjudged",)


AVAILABLE = {name: Fixed(name) for name in ("text_policy", "local", "openai", "extra")}
AVAILABLE["extra"].verdict = Verdict.REVIEW
PLATFORM = ChainPolicy(moderators=("text_policy", "local", "openai"), required=frozenset({"text_policy", "openai"}))


def test_a_tenant_may_reorder_add_and_drop_what_is_not_required():
    chain = build_chain(PLATFORM, AVAILABLE, TenantChain(moderators=("openai", "text_policy", "extra")))
    assert [m.name for m in chain.moderators] == ["openai", "text_policy", "extra"]
    assert [m.name for m in build_chain(PLATFORM, AVAILABLE).moderators] == ["text_policy", "local", "openai"]


@pytest.mark.parametrize("names", [("local", "openai"), ("text_policy",), ("text_policy", "openai", "nope"),
                                   ("text_policy", "openai", "openai")])
def test_a_tenant_cannot_drop_a_required_moderator_or_name_an_unknown_one(names):
    with pytest.raises(ChainRefused):
        build_chain(PLATFORM, AVAILABLE, TenantChain(moderators=names))


def test_all_are_required_unless_the_operator_says_otherwise():
    with pytest.raises(ChainRefused, match="local"):
        build_chain(ChainPolicy(moderators=("text_policy", "local")), AVAILABLE,
                    TenantChain(moderators=("text_policy",)))


def test_a_tenant_may_tighten_review_to_block():
    tenant = TenantChain(moderators=("text_policy", "openai", "extra"), review_is_block=True)
    result = build_chain(PLATFORM, AVAILABLE, tenant).judge(TEXT)
    assert result.verdict is Verdict.BLOCK and result.judgements[-1].verdict is Verdict.REVIEW
    assert build_chain(PLATFORM, AVAILABLE, tenant.model_copy(update={"review_is_block": False})).judge(
        TEXT).verdict is Verdict.REVIEW
