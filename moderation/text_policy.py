"""The text policy: term lists, the platform's and a tenant's, matched as whole words on the
skeleton of a text (moderation/skeleton.py), so hidden characters and look-alikes do not help.

Lists come from a TOML file (the operator's; `PLATFORM_TERMS` is the one shipped) and from a
tenant plan's own additions:

    [lists.illicit]          # the list's name is the category it reports
    verdict = "block"        # or "review"
    terms = ["forbidden-content"]

A tenant is an adversary: its lists are added beside the platform's (named `tenant:...`), never
in place of them, and the most severe match wins, so a tenant can add terms or make one stricter
but cannot remove or soften one of the platform's. Tenant terms are tenant text and pass its rule
(contracts/tenant_text.py) before they are used.

Unreadable input: a text that has characters but no letter or digit left once normalised (2,000
zero-width and combining marks, say) is `block`, category `unreadable`: nobody can read it, a
provider's model may still act on it, and a reviewer would judge nothing. A text over
MAX_TEXT_CHARS is `block`, category `oversize`, before any work is done: prompts are far shorter,
so such a text is not a prompt. A text whose characters are mostly invisible (over half, at least
OBFUSCATED_MIN of them) is at least `review`, category `obfuscated`: that is hiding, not writing.
White space alone is nothing to judge: `allow`.
"""

from __future__ import annotations

import time
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from contracts.moderation import Evidence, Judgement, TermMatch, TextSubject, Verdict, most_severe
from contracts.tenant_text import REFUSED, first_unsafe
from moderation.skeleton import Skeleton, skeleton, words_of

PLATFORM_TERMS = Path(__file__).with_name("platform_terms.toml")
MAX_TEXT_CHARS = 20_000
MAX_TERMS = 2_000  # per list file, or per tenant
MAX_TERM_CHARS = 100
OBFUSCATED_MIN = 16
VERSION = "text-policy-1"  # the matching rules' version, recorded with each judgement


class TermList(BaseModel):
    model_config = ConfigDict(frozen=True)

    verdict: Verdict
    terms: tuple[str, ...] = Field(default=(), max_length=MAX_TERMS)

    @field_validator("verdict")
    @classmethod
    def _not_allow(cls, verdict: Verdict) -> Verdict:
        if verdict is Verdict.ALLOW:
            raise ValueError("a term list blocks or sends to review; `allow` would list nothing")
        return verdict

    @field_validator("terms")
    @classmethod
    def _readable_terms(cls, terms: tuple[str, ...]) -> tuple[str, ...]:
        for term in terms:
            if len(term) > MAX_TERM_CHARS:
                raise ValueError(f"term over {MAX_TERM_CHARS} characters")
            if first_unsafe(term):
                raise ValueError(f"term {REFUSED}")
            if not words_of(term):
                raise ValueError(f"term {term!r} has no letter or digit")
        return terms


class TermLists(BaseModel):
    """The `[lists.NAME]` tables of a file or a tenant plan."""

    lists: dict[str, TermList] = Field(default_factory=dict, max_length=50)

    @field_validator("lists")
    @classmethod
    def _bounded(cls, lists: dict[str, TermList]) -> dict[str, TermList]:
        if sum(len(t.terms) for t in lists.values()) > MAX_TERMS:
            raise ValueError(f"over {MAX_TERMS} terms in all")
        for name in lists:
            if not name or len(name) > 40 or first_unsafe(name):
                raise ValueError("a list name is 1-40 characters of text")
        return lists


def load_terms(path: Path) -> TermLists:
    """A term-list file; an unreadable or invalid one raises (the operator's mistake, told at start)."""
    with path.open("rb") as fh:
        return TermLists.model_validate(tomllib.load(fh))


class TextPolicy:
    """A Moderator of text: the platform's lists, plus a tenant's additions (`for_tenant`)."""

    name = "text_policy"
    kinds = frozenset({"text"})

    def __init__(self, platform: TermLists, tenant: TermLists | None = None):
        named = {f"platform:{k}": v for k, v in platform.lists.items()}
        named |= {f"tenant:{k}": v for k, v in (tenant.lists if tenant else {}).items()}
        # first word -> [(the term's words, list name, term as written, verdict)]
        self._index: dict[str, list[tuple[tuple[str, ...], str, str, Verdict]]] = {}
        for list_name, term_list in named.items():
            for term in term_list.terms:
                words = words_of(term)
                # A phrase also matches run together: an invisible separator is dropped, not a space.
                for form in {words, ("".join(words),)}:
                    self._index.setdefault(form[0], []).append((form, list_name, term, term_list.verdict))
        self._platform = platform

    @classmethod
    def from_file(cls, path: Path = PLATFORM_TERMS) -> TextPolicy:
        return cls(load_terms(path))

    def for_tenant(self, additions: TermLists | Mapping | None) -> TextPolicy:
        """This policy with a tenant plan's lists added (never replacing the platform's)."""
        if additions is None:
            return self
        return TextPolicy(self._platform, TermLists.model_validate(additions))

    def matches(self, found: Skeleton) -> list[tuple[TermMatch, Verdict]]:
        """Every listed term found as whole words in `found`, each once."""
        hits: dict[tuple[str, str], Verdict] = {}
        words = found.words
        for i, word in enumerate(words):
            for term_words, list_name, term, verdict in self._index.get(word, ()):
                if words[i:i + len(term_words)] == term_words:
                    hits[(list_name, term)] = verdict
        return [(TermMatch(list=name, term=term), verdict) for (name, term), verdict in hits.items()]

    def judge(self, subject: TextSubject) -> Judgement:
        started = time.perf_counter()
        verdict, categories, terms = self._verdict(subject.text)
        return Judgement(
            verdict=verdict, moderator=self.name, model_version=VERSION, subject_kind="text",
            categories=tuple(categories), scores={c: 1.0 for c in categories},
            evidence=Evidence(terms=tuple(terms)), latency_ms=(time.perf_counter() - started) * 1000,
        )

    def _verdict(self, text: str) -> tuple[Verdict, list[str], list[TermMatch]]:
        if len(text) > MAX_TEXT_CHARS:
            return Verdict.BLOCK, ["oversize"], []
        if not text.strip():
            return Verdict.ALLOW, [], []
        found = skeleton(text)
        if not found.words:
            return Verdict.BLOCK, ["unreadable"], []
        hits = self.matches(found)
        verdicts = [v for _, v in hits]
        categories = _unique(m.list.partition(":")[2] for m, _ in hits)
        if found.invisible >= OBFUSCATED_MIN and found.invisible * 2 > found.length:
            verdicts.append(Verdict.REVIEW)
            categories.append("obfuscated")
        return most_severe(verdicts), categories, [m for m, _ in hits]


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))
