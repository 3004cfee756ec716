"""The production plan (TOML): templates x locales x aspect ratios x variants.

A plan is data, validated once at the boundary; its canonical JSON hash is its id, so the same
plan text (modulo formatting) is the same plan.
"""

from __future__ import annotations

import hashlib
import json
import re
import string
import tomllib
from collections.abc import Mapping
from decimal import Decimal
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from contracts.admission import OwnLimits, PlanLimits, PriorityClass
from contracts.routing import MAX_FALLBACKS, Route
from contracts.task import rounds_to_nothing
from contracts.tenant_text import REFUSED, is_blank, unsafe_in

if TYPE_CHECKING:
    from adapters.providers.base import VideoProvider

LOCALE_RE = re.compile(r"^[a-z]{2,3}(-[A-Z][a-z]{3})?(-[A-Z]{2}|-\d{3})?$")
SUPPORTED_RATIOS = ("9:16", "16:9", "1:1")
PROMPT_FIELDS = ("title", "description", "price", "currency", "category", "hook", "product_id")
MAX_PROMPT_TEMPLATE_CHARS = 2000  # a prompt template as written
MAX_PROMPT_CHARS = 4000  # a prompt once its fields are filled in (longer: the product goes to copy review)
MAX_DURATION_S = 600  # as POST /v1/generations allows
MAX_COST_ESTIMATE = 1_000_000
ID_CHARS = 100
MAX_HOOK_CHARS = 500


def prompt_parts(text: str) -> tuple[int, tuple[str, ...]]:
    """A prompt template's literal length and the fields it names, in order. ValueError unless it
    is text with `{name}` placeholders of PROMPT_FIELDS only (`{{` and `}}` are braces): no format
    spec, no conversion, no attribute or index access. Rendering it with str.format is then safe."""
    return _prompt_parts(text)


@lru_cache(maxsize=1024)
def _prompt_parts(text: str) -> tuple[int, tuple[str, ...]]:
    literal, names = 0, []
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:  # a lone `{` or `}`
        raise ValueError(f"{exc} (write {{{{ or }}}} for a brace)") from None
    for text_part, name, spec, conversion in parsed:
        literal += len(text_part)
        if name is None:
            continue
        shown = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
        if name not in PROMPT_FIELDS:
            raise ValueError(f"{shown[:60]} is not one of {{{'}, {'.join(PROMPT_FIELDS)}}}")
        if spec or conversion:
            raise ValueError(f"{shown[:60]}: only {{{name}}} may be written (no format spec or conversion)")
        names.append(name)
    return literal, tuple(names)


class PlanError(ValueError):
    """The plan file is unreadable or invalid (exit code 2 at the CLI)."""


class ReviewMode(StrEnum):
    """Whether a person sees a template's videos before they count as done."""

    REQUIRED = "required"  # every video
    SAMPLE = "sample"  # a share (`sample_rate`), plus every video whose automatic checks failed
    OFF = "off"


class Template(BaseModel):
    id: str = Field(min_length=1, max_length=ID_CHARS)
    version: str = Field(min_length=1, max_length=ID_CHARS)
    duration_s: Decimal = Field(default=Decimal("3"), gt=0, le=MAX_DURATION_S)
    provider: str = Field(default="emulator", min_length=1, max_length=64)
    model: str = Field(default="emu-motion-1", min_length=1, max_length=100)
    cost_estimate: Decimal = Field(ge=0, le=MAX_COST_ESTIMATE,
                                   description="credits reserved per task before submit (operator plans; "
                                               "the server's price for a tenant's)")
    max_title_chars: int = Field(default=80, ge=1, le=1000)
    max_description_chars: int = Field(default=500, ge=1, le=10_000)
    prompts: dict[str, str] = Field(description="prompt text per locale, with {title} {price} {hook} ...")
    review: ReviewMode | None = None  # None (absent) is "off"
    sample_rate: float | None = Field(default=None, ge=0, le=1, description="share reviewed under 'sample'")
    fallbacks: list[Route] | None = Field(default=None, max_length=MAX_FALLBACKS,
                                          description="routes acceptable after the primary, in order")
    lock_model: bool | None = None  # true: no route but the primary (None, absent, is false)

    @field_validator("duration_s")
    @classmethod
    def _a_millisecond(cls, duration_s: Decimal) -> Decimal:
        if rounds_to_nothing(duration_s):
            raise ValueError("the duration is shorter than a millisecond")
        return duration_s

    @model_validator(mode="after")
    def _distinct_routes(self) -> Template:
        seen = [Route(provider=self.provider, model=self.model)]
        for i, route in enumerate(self.fallbacks or []):
            if route in seen:
                raise ValueError(f"template {self.id}: fallbacks[{i}] repeats the route {route}")
            seen.append(route)
        return self

    def routes(self) -> list[Route]:
        """The primary route, then the fallbacks in order."""
        return [Route(provider=self.provider, model=self.model), *(self.fallbacks or [])]

    @model_validator(mode="after")
    def _sample_rate(self) -> Template:
        if self.review is ReviewMode.SAMPLE and self.sample_rate is None:
            raise ValueError(f"template {self.id}: review = \"sample\" needs sample_rate (0..1)")
        if self.sample_rate is not None and self.review is not ReviewMode.SAMPLE:
            raise ValueError(f"template {self.id}: sample_rate applies only to review = \"sample\"")
        return self

    @model_validator(mode="after")
    def _prompt_templates(self) -> Template:
        """Only `{name}` placeholders: a format spec (`{title:>5000000}`) would pad each prompt to any
        size, an attribute (`{title.x}`) fails at expansion."""
        for locale, text in self.prompts.items():
            where = f"template {self.id}: prompt for {locale[:20]}"
            if len(text) > MAX_PROMPT_TEMPLATE_CHARS:
                raise ValueError(f"{where} has {len(text)} characters; at most {MAX_PROMPT_TEMPLATE_CHARS}")
            if is_blank(text):
                raise ValueError(f"{where} is empty (white space and invisible characters only)")
            try:
                prompt_parts(text)
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from None
        return self


class Variant(BaseModel):
    id: str = Field(min_length=1, max_length=ID_CHARS)
    hook: dict[str, str] = Field(default_factory=dict, description="opening hook per locale")

    @field_validator("hook")
    @classmethod
    def _short_hooks(cls, hook: dict[str, str]) -> dict[str, str]:
        for locale, text in hook.items():
            if len(text) > MAX_HOOK_CHARS:
                raise ValueError(f"hook for {locale[:20]} has {len(text)} characters; at most {MAX_HOOK_CHARS}")
        return hook


class CatalogOptions(BaseModel):
    name: str | None = None
    default_currency: str | None = None
    columns: dict[str, str] | None = None  # our field -> header in the file


class Deadlines(BaseModel):
    """How long a task may take in all (waits and retries included) and one provider job may run."""

    model_config = ConfigDict(extra="forbid")
    task_hours: float = Field(default=24.0, gt=0, le=24 * 30)
    job_minutes: float = Field(default=60.0, gt=0, le=24 * 60)


class ReviewSettings(BaseModel):
    """How review works for the templates that ask for it: the automatic checks' tolerances and
    what happens when nobody decides before the review deadline."""

    model_config = ConfigDict(extra="forbid")
    deadline_hours: float = Field(default=72.0, gt=0, le=24 * 90)
    on_deadline: Literal["expire", "approve"] = "expire"  # EXPIRED, or approved by "review-deadline"
    duration_tolerance_s: float = Field(default=0.5, ge=0, le=60)
    audio_expected: bool = True  # a silent video fails the silence check
    max_black_ratio: float = Field(default=0.3, ge=0, le=1)  # share of the video that may be black
    max_frozen_ratio: float = Field(default=0.5, ge=0, le=1)  # share of the video that may be frozen
    # A template without review whose video fails a check after its one regeneration: REVIEW ("review",
    # the default) or FAILED_FINAL naming the check ("fail"). Absent: left out of the plan's hash.
    on_failed_checks: Literal["review", "fail"] | None = None


# Operational settings: absent unless the plan sets them, so plans without them keep their hash.
_OPERATIONAL = ("deadlines", "providers", "tenant_limits", "review", "priority")
_TEMPLATE_OPTIONAL = ("review", "sample_rate", "fallbacks", "lock_model")  # likewise per template


class Plan(BaseModel):
    name: str = Field(min_length=1, max_length=200)
    locales: list[str]
    aspect_ratios: list[str]
    templates: list[Template]
    variants: list[Variant] = Field(default_factory=lambda: [Variant(id="default")])
    catalog: CatalogOptions = Field(default_factory=CatalogOptions)
    deadlines: Deadlines | None = None
    providers: dict[str, PlanLimits] | None = Field(default=None, description="admission limits per provider "
                                                                           "(an operator's plan only)")
    tenant_limits: dict[str, OwnLimits] | None = Field(
        default=None, description="a tenant's own limits per provider (what a tenant's `[providers]` becomes)")
    review: ReviewSettings | None = None
    # The line its tasks join at every gate (absent: bulk); "interactive" is an operator's to give (/v1/imports
    # refuses it), for work that must go before the imports queued (docs/architecture.md, "Admission")
    priority: PriorityClass | None = None

    @field_validator("aspect_ratios")
    @classmethod
    def _ratios(cls, ratios: list[str]) -> list[str]:
        bad = [r for r in ratios if r not in SUPPORTED_RATIOS]
        if bad:
            raise ValueError(f"unsupported aspect ratios {bad}; supported: {list(SUPPORTED_RATIOS)}")
        return ratios

    @model_validator(mode="after")
    def _unique_ids(self) -> Plan:
        for label, ids in (("template", [t.id for t in self.templates]), ("variant", [v.id for v in self.variants])):
            dupes = {i for i in ids if ids.count(i) > 1}
            if dupes:
                raise ValueError(f"duplicate {label} ids: {sorted(dupes)}")
        if not self.templates:
            raise ValueError("a plan needs at least one template")
        for section in (self.providers, self.tenant_limits):
            unused = set(section or {}) - {t.provider for t in self.templates}
            if unused:
                raise ValueError(f"[providers] names {sorted(unused)}, which no template uses")
        return self

    def canonical_json(self) -> str:
        unset = {name for name in _OPERATIONAL if getattr(self, name) is None}
        data = self.model_dump(mode="json", exclude=unset)
        if data.get("review") and data["review"]["on_failed_checks"] is None:
            del data["review"]["on_failed_checks"]
        for template in data["templates"]:
            for name in _TEMPLATE_OPTIONAL:
                if template[name] is None:
                    del template[name]
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    def template(self, template_id: str) -> Template | None:
        return next((t for t in self.templates if t.id == template_id), None)

    def limits_for(self, provider: str) -> PlanLimits | None:
        """The operator plan's limits for the provider's shared gate (a tenant's plan has none)."""
        return (self.providers or {}).get(provider)

    def own_limit(self, provider: str) -> int | None:
        """The slots a tenant's plan asks for its own tasks of the provider (its tenant layer)."""
        own = (self.tenant_limits or {}).get(provider)
        return own.max_concurrent if own else None

    @property
    def plan_id(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()

    @property
    def combinations(self) -> int:
        return len(self.templates) * len(self.locales) * len(self.aspect_ratios) * len(self.variants)


def load_plan(path: Path) -> Plan:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise PlanError(f"plan file not found: {path}") from exc
    return parse_plan(text, f"plan {path}")


def parse_plan(text: str, where: str = "plan") -> Plan:
    """A plan from its TOML text (`where` names it in errors: a file, or an API request)."""
    return plan_from_data(read_toml(text, where), where)


def read_toml(text: str, where: str = "plan") -> dict:
    """A plan's TOML text as tables, not validated yet."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PlanError(f"{where} is not valid TOML: {exc}") from exc
    except RecursionError as exc:  # tomllib parses nested arrays and tables recursively
        raise PlanError(f"{where} nests arrays or tables too deeply to read") from exc


def plan_from_data(data: object, where: str = "plan") -> Plan:
    """A plan from already parsed data (TOML tables or a JSON object). Its text is held to the rule
    for tenant text (contracts/tenant_text.py) once parsed: a TOML escape (`"x\\u0000y"`) writes the
    character that a check of the raw text or the request's JSON never sees."""
    unsafe = unsafe_in(data)
    if unsafe is not None:
        raise PlanError(f"{where}: {unsafe or 'the plan'}: {REFUSED}")
    try:
        return Plan.model_validate(data)
    except RecursionError as exc:
        raise PlanError(f"{where} nests arrays or tables too deeply to read") from exc
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise PlanError(f"{where} is invalid: {problems}") from exc


def check_routes(plan: Plan, providers: Mapping[str, VideoProvider], where: str = "plan") -> None:
    """Every fallback route names a provider this deployment has and a model it offers: a plan that
    names another is refused before anything is written (a fallback is tried only when the primary
    fails, too late to find a typo)."""
    for t, template in enumerate(plan.templates):
        for f, route in enumerate(template.fallbacks or []):
            field = f"templates[{t}].fallbacks[{f}]"
            provider = providers.get(route.provider)
            if provider is None:
                raise PlanError(f"{where}: {field}.provider: no provider {route.provider!r} "
                                f"(known: {', '.join(sorted(providers))})")
            models = provider.capabilities.models
            if models is not None and route.model not in models:
                raise PlanError(f"{where}: {field}.model: {route.provider} has no model {route.model!r} "
                                f"(known: {', '.join(models)})")
