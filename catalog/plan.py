"""The production plan (TOML): templates x locales x aspect ratios x variants.

A plan is data, validated once at the boundary; its canonical JSON hash is its id, so the same
plan text (modulo formatting) is the same plan.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from decimal import Decimal
from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from contracts.admission import PlanLimits

LOCALE_RE = re.compile(r"^[a-z]{2,3}(-[A-Z][a-z]{3})?(-[A-Z]{2}|-\d{3})?$")
SUPPORTED_RATIOS = ("9:16", "16:9", "1:1")
PROMPT_FIELDS = ("title", "description", "price", "currency", "category", "hook", "product_id")


class PlanError(ValueError):
    """The plan file is unreadable or invalid (exit code 2 at the CLI)."""


class ReviewMode(StrEnum):
    """Whether a person sees a template's videos before they count as done."""

    REQUIRED = "required"  # every video
    SAMPLE = "sample"  # a share (`sample_rate`), plus every video whose automatic checks failed
    OFF = "off"


class Template(BaseModel):
    id: str
    version: str
    duration_s: Decimal = Decimal("3")
    provider: str = "emulator"
    model: str = "emu-motion-1"
    cost_estimate: Decimal = Field(description="credits reserved per task before submit")
    max_title_chars: int = 80
    max_description_chars: int = 500
    prompts: dict[str, str] = Field(description="prompt text per locale, with {title} {price} {hook} ...")
    review: ReviewMode | None = None  # None (absent) is "off"
    sample_rate: float | None = Field(default=None, ge=0, le=1, description="share reviewed under 'sample'")

    @model_validator(mode="after")
    def _sample_rate(self) -> Template:
        if self.review is ReviewMode.SAMPLE and self.sample_rate is None:
            raise ValueError(f"template {self.id}: review = \"sample\" needs sample_rate (0..1)")
        if self.sample_rate is not None and self.review is not ReviewMode.SAMPLE:
            raise ValueError(f"template {self.id}: sample_rate applies only to review = \"sample\"")
        return self

    @field_validator("prompts")
    @classmethod
    def _known_fields(cls, prompts: dict[str, str]) -> dict[str, str]:
        for locale, text in prompts.items():
            for name in re.findall(r"{(\w+)}", text):
                if name not in PROMPT_FIELDS:
                    raise ValueError(f"prompt for {locale} uses unknown field {{{name}}}; known: {PROMPT_FIELDS}")
        return prompts


class Variant(BaseModel):
    id: str
    hook: dict[str, str] = Field(default_factory=dict, description="opening hook per locale")


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
    duration_tolerance_s: float = Field(default=0.5, ge=0)
    audio_expected: bool = True  # a silent video fails the silence check
    max_black_ratio: float = Field(default=0.3, ge=0, le=1)  # share of the video that may be black
    max_frozen_ratio: float = Field(default=0.5, ge=0, le=1)  # share of the video that may be frozen


# Operational settings: absent unless the plan sets them, so plans without them keep their hash.
_OPERATIONAL = ("deadlines", "providers", "review")
_TEMPLATE_OPTIONAL = ("review", "sample_rate")  # likewise per template


class Plan(BaseModel):
    name: str
    locales: list[str]
    aspect_ratios: list[str]
    templates: list[Template]
    variants: list[Variant] = Field(default_factory=lambda: [Variant(id="default")])
    catalog: CatalogOptions = Field(default_factory=CatalogOptions)
    deadlines: Deadlines | None = None
    providers: dict[str, PlanLimits] | None = Field(default=None, description="admission limits per provider")
    review: ReviewSettings | None = None

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
        unused = set(self.providers or {}) - {t.provider for t in self.templates}
        if unused:
            raise ValueError(f"[providers] names {sorted(unused)}, which no template uses")
        return self

    def canonical_json(self) -> str:
        unset = {name for name in _OPERATIONAL if getattr(self, name) is None}
        data = self.model_dump(mode="json", exclude=unset)
        for template in data["templates"]:
            for name in _TEMPLATE_OPTIONAL:
                if template[name] is None:
                    del template[name]
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    def template(self, template_id: str) -> Template | None:
        return next((t for t in self.templates if t.id == template_id), None)

    def limits_for(self, provider: str) -> PlanLimits | None:
        return (self.providers or {}).get(provider)

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
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PlanError(f"{where} is not valid TOML: {exc}") from exc
    except RecursionError as exc:  # tomllib parses nested arrays and tables recursively
        raise PlanError(f"{where} nests arrays or tables too deeply to read") from exc
    return plan_from_data(data, where)


def plan_from_data(data: object, where: str = "plan") -> Plan:
    """A plan from already parsed data (TOML tables or a JSON object)."""
    try:
        return Plan.model_validate(data)
    except RecursionError as exc:
        raise PlanError(f"{where} nests arrays or tables too deeply to read") from exc
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise PlanError(f"{where} is invalid: {problems}") from exc
