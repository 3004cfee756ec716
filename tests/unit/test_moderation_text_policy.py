"""The text policy: a listed term is found however it is disguised, only as whole words; a tenant's
lists add to the platform's and never remove them; hostile text gets a clear verdict."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from contracts.moderation import TermMatch, TextSubject, Verdict
from moderation.text_policy import MAX_TEXT_CHARS, PLATFORM_TERMS, TermLists, TextPolicy, load_terms

PLATFORM = TermLists.model_validate({"lists": {
    "illicit": {"verdict": "block", "terms": ["forbidden-content"]},
    "crude": {"verdict": "review", "terms": ["ass"]},
}})


def judged(text: str, policy: TextPolicy | None = None):  # noqa: ANN201 - a Judgement
    return (policy or TextPolicy(PLATFORM)).judge(TextSubject(text=text))


@pytest.mark.parametrize("disguised", [
    "a lamp, forbidden-content, on a desk",
    "forbidden content",
    "FORBIDDEN_CONTENT",
    "forb\u200bidden\u200d-con\u2060tent\ufeff",  # zero-width space, joiner, word joiner, BOM
    "\u202eforbidden-content\u202c and \u2067forbidden\u2069-content",  # bidi override and isolate
    "fo\u0301rbi\u0308dde\u0300n-co\u0336nte\u0489nt",  # combining marks (accents, overlay, enclosing)
    "ｆｏｒｂｉｄｄｅｎ－ｃｏｎｔｅｎｔ",  # full-width forms
    "f\u043erbidd\u0435n-\u0441\u043ent\u0435nt",  # Cyrillic о е с
    "f\u03bfrb\u0399dden-c\u03bfntent",  # Greek ο and capital Ι
    "forbidden\u200bcontent",  # the separator itself invisible
    "𝐟𝐨𝐫𝐛𝐢𝐝𝐝𝐞𝐧-𝐜𝐨𝐧𝐭𝐞𝐧𝐭",  # mathematical bold
])
def test_a_listed_term_is_found_however_it_is_disguised(disguised):
    judgement = judged(disguised)
    assert judgement.verdict is Verdict.BLOCK and judgement.categories == ("illicit",)
    assert judgement.evidence.terms == (TermMatch(list="platform:illicit", term="forbidden-content"),)


@pytest.mark.parametrize("text", ["a classic brass lamp", "passage", "forbidden-contents", "contentforbidden",
                                  "forbidden, then content later"])
def test_words_containing_a_term_are_not_the_term(text):
    assert judged(text).verdict is Verdict.ALLOW


def test_review_terms_and_the_most_severe_wins():
    assert judged("what an a\u0455\u0455").verdict is Verdict.REVIEW  # Cyrillic dze
    both = judged("ass and forbidden-content")
    assert both.verdict is Verdict.BLOCK and set(both.categories) == {"illicit", "crude"}


def test_a_tenant_adds_terms_but_cannot_remove_or_soften_the_platforms():
    platform = TextPolicy(PLATFORM)
    tenant = platform.for_tenant({"lists": {
        "illicit": {"verdict": "review", "terms": []},  # same name, softer, empty: a separate list
        "crude": {"verdict": "review", "terms": ["forbidden-content"]},
        "rivals": {"verdict": "block", "terms": ["Acme Corp"]},
    }})
    platform_term = judged("forbidden-content", tenant)
    assert platform_term.verdict is Verdict.BLOCK
    assert TermMatch(list="platform:illicit", term="forbidden-content") in platform_term.evidence.terms
    added = judged("better than acme  CORP", tenant)
    assert added.verdict is Verdict.BLOCK
    assert added.evidence.terms == (TermMatch(list="tenant:rivals", term="Acme Corp"),)
    assert judged("better than acme corp", platform).verdict is Verdict.ALLOW  # the platform's policy unchanged
    assert platform.for_tenant(None) is platform


@pytest.mark.parametrize("lists", [
    {"x": {"verdict": "allow", "terms": ["ok"]}},  # a list cannot allow
    {"x": {"verdict": "block", "terms": ["bad\u202eword"]}},  # tenant text rule: no bidi control
    {"x": {"verdict": "block", "terms": ["\u200b\u0301"]}},  # a term that matches nothing
    {"x": {"verdict": "block", "terms": ["w" * 101]}},
    {"x\x1b": {"verdict": "block", "terms": ["word"]}},
])
def test_refused_lists(lists):
    with pytest.raises(ValidationError):
        TextPolicy(PLATFORM).for_tenant({"lists": lists})


def test_a_hostile_prompt_of_invisible_and_combining_marks_is_blocked_as_unreadable():
    hostile = ("\u200b\u0301\u202e\u0489" * 500)[:2000]
    judgement = judged(hostile)
    assert len(hostile) == 2000
    assert (judgement.verdict, judgement.categories) == (Verdict.BLOCK, ("unreadable",))


def test_mostly_invisible_text_goes_to_review_and_oversize_is_blocked_unread():
    hidden = judged("a lamp " + "\u200b" * 1990)
    assert (hidden.verdict, hidden.categories) == (Verdict.REVIEW, ("obfuscated",))
    assert judged("a lamp \u200b on a desk").verdict is Verdict.ALLOW
    oversize = judged("a" * (MAX_TEXT_CHARS + 1))
    assert (oversize.verdict, oversize.categories) == (Verdict.BLOCK, ("oversize",))
    assert judged("   \n").verdict is Verdict.ALLOW


def test_the_shipped_platform_file_lists_the_emulators_word():
    assert "forbidden-content" in load_terms(PLATFORM_TERMS).lists["illicit"].terms
    assert TextPolicy.from_file().judge(TextSubject(text="a f\u043erbidden-content lamp")).verdict is Verdict.BLOCK
