"""Expansion: one product x plan -> deterministic task specs, with their identity.

The task id is the hash of a canonical identity object (sorted-key JSON): catalog, product id,
template version, locale, ratio, variant, plus the hashes of everything else that changes the
output (prompt, source image, render parameters, and the overlay burned into the video: title,
price, hook, with the template version and the font that draws them). Same inputs -> same id,
whatever the row order or how often the expansion runs; a changed prompt, image, price or hook ->
a new task (docs/architecture.md, "The flow of one catalog").
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from decimal import Decimal

from pydantic import BaseModel

from catalog.plan import LOCALE_RE, MAX_PROMPT_CHARS, Plan, Template, Variant, prompt_parts
from catalog.records import Issue, IssueAction, ProductRecord

# The font the overlay is drawn with: its file name and the start of the file's sha256. A new font
# draws different pixels, so it is part of every task's identity; tests/unit/test_plan_and_expansion.py
# fails when the installed font file no longer matches, and bumping this re-identifies every task.
OVERLAY_FONT = "Roboto-Regular.ttf@797e35f7f5d6"
OVERLAY_FIELDS = ("title", "price", "hook")  # what is burned into the video, top to bottom


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


_STR = json.encoder.encode_basestring  # a str as the canonical encoder writes it (ensure_ascii=False)
_FONT_JSON = _STR(OVERLAY_FONT)


def canonical_json(obj: object) -> str:
    """Sorted keys, no spaces, UTF-8 as is: the bytes task ids are hashed from (one shared encoder:
    json.dumps with options builds a new one per call, which showed in the import's profile)."""
    return _CANONICAL.encode(obj)


def task_identity(
    *,
    tenant: str,
    catalog: str,
    product_id: str,
    template_version: str,
    locale: str,
    aspect_ratio: str,
    variant: str,
    prompt_sha256: str,
    image_sha256: str,
    render_sha256: str,
    overlay_sha256: str,
) -> dict[str, str]:
    return {
        "tenant": tenant,
        "catalog": catalog,
        "product_id": product_id,
        "template_version": template_version,
        "locale": locale,
        "aspect_ratio": aspect_ratio,
        "variant": variant,
        "prompt_sha256": prompt_sha256,
        "image_sha256": image_sha256,
        "render_sha256": render_sha256,
        "overlay_sha256": overlay_sha256,
    }


def task_id_for(identity: dict[str, str]) -> str:
    return task_id_of_json(canonical_json(identity))


def task_id_of_json(identity_json: str) -> str:
    """The task id from an identity already in canonical JSON (the import keeps that text)."""
    return sha256_text(identity_json)[:32]


class TaskSpec(BaseModel):
    id: str  # task_id_for(identity): the first 32 hex of sha256(identity_json)
    identity: dict[str, str]
    identity_json: str  # canonical_json(identity), kept: the import stores it as is
    product_id: str
    template_id: str
    template_version: str
    locale: str
    aspect_ratio: str
    variant: str
    prompt: str
    prompt_sha256: str
    overlay: dict[str, str]
    duration_s: Decimal
    provider: str
    model: str
    estimated_cost: Decimal


def format_price(product: ProductRecord) -> str:
    if product.price is None:
        return ""
    return f"{product.price:.2f} {product.currency or ''}".strip()


def overlay_sha256(overlay: dict[str, str], template_version: str) -> str:
    """Hash of everything drawn over the video: its lines in order, the template version, the font.
    The text hashed is canonical_json({"lines": [...], "template_version": ..., "font": ...}),
    written from its parts (the encoder's call costs more than the hash; a test compares)."""
    lines = ",".join(_STR(overlay.get(field, "")) for field in OVERLAY_FIELDS)
    return sha256_text(f'{{"font":{_FONT_JSON},"lines":[{lines}],"template_version":{_STR(template_version)}}}')


def overlay_json(overlay: dict[str, str]) -> str:
    """The overlay as compact JSON in its order (what json.dumps(ensure_ascii=False) writes)."""
    return "{" + ",".join(f"{_STR(key)}:{_STR(value)}" for key, value in overlay.items()) + "}"


def _fields(product: ProductRecord, hook: str) -> dict[str, str]:
    return {
        "title": product.title,
        "description": product.description,
        "price": format_price(product),
        "currency": product.currency or "",
        "category": product.category or "",
        "hook": hook,
        "product_id": product.product_id,
    }


def check_plan_locales(plan: Plan) -> list[Issue]:
    """Plan-level problems: a locale that is malformed or that a template has no prompt for."""
    issues: list[Issue] = []
    for locale in plan.locales:
        if not LOCALE_RE.match(locale):
            issues.append(
                Issue(field="locale", value=locale, reason="not a BCP 47 locale code (e.g. en-US)",
                      action=IssueAction.EXPANSION_INVALID)
            )
            continue
        for template in plan.templates:
            if locale not in template.prompts:
                issues.append(
                    Issue(field="locale", value=locale,
                          reason=f"template {template.id} has no prompt for this locale",
                          action=IssueAction.EXPANSION_INVALID)
                )
    return issues


def _usable(template: Template, locale: str) -> bool:
    return bool(LOCALE_RE.match(locale)) and locale in template.prompts


def copy_issues(product: ProductRecord, plan: Plan) -> list[Issue]:
    """Texts longer than a template allows, and prompts that would be longer than MAX_PROMPT_CHARS
    once filled in, go to copy review (the product makes no task)."""
    issues: list[Issue] = []
    row = product.rows[0] if product.rows else None
    fields = _fields(product, "")
    for template in plan.templates:
        for field, limit in (("title", template.max_title_chars), ("description", template.max_description_chars)):
            value = getattr(product, field)
            if len(value) > limit:
                issues.append(
                    Issue(row=row, product_id=product.product_id, field=field, value=value[:80],
                          reason=f"{len(value)} characters; template {template.id} allows {limit}",
                          action=IssueAction.COPY_REVIEW)
                )
        for locale, length in _prompt_lengths(fields, plan, template):
            if length > MAX_PROMPT_CHARS:
                issues.append(Issue(row=row, product_id=product.product_id, field="prompt", value=locale,
                                    reason=f"template {template.id}'s prompt for {locale} would have {length} "
                                           f"characters; at most {MAX_PROMPT_CHARS}",
                                    action=IssueAction.COPY_REVIEW))
    return issues


def _prompt_lengths(fields: dict[str, str], plan: Plan, template: Template) -> Iterator[tuple[str, int]]:
    """Each used locale's longest rendered prompt for a product's fields, counted without rendering it."""
    for locale, text in template.prompts.items():
        if locale not in plan.locales:
            continue
        literal, names = prompt_parts(text)
        hook = max((len(v.hook.get(locale, "")) for v in plan.variants), default=0)
        yield locale, literal + sum(hook if name == "hook" else len(fields[name]) for name in names)


@dataclass(frozen=True, slots=True, eq=False)
class Combination:
    """One template x locale x ratio x variant of a plan, with what all its tasks share: computed
    once per import, not once per task (the import expands 800,000 tasks from 8 of these)."""

    template: Template
    locale: str
    aspect_ratio: str
    variant: Variant
    hook: str
    render_sha256: str
    identity_parts: tuple[str, str, str, str] = dataclass_field(init=False)  # ratio, locale, version, variant as JSON

    def __post_init__(self) -> None:
        parts = (_STR(self.aspect_ratio), _STR(self.locale), _STR(self.template.version), _STR(self.variant.id))
        object.__setattr__(self, "identity_parts", parts)


@dataclass(frozen=True, slots=True, eq=False)
class Expanded:
    """One task of one product: what differs from task to task (the rest is its combination's)."""

    combination: Combination
    id: str
    identity_json: str
    prompt: str
    prompt_sha256: str
    overlay: dict[str, str]  # shared by the tasks of the same template, locale and hook
    overlay_sha256: str


def combinations(plan: Plan) -> list[Combination]:
    """Every combination of the plan, in expansion order; locales a template cannot serve are skipped."""
    out: list[Combination] = []
    for template in plan.templates:
        render_sha = sha256_text(canonical_json([template.provider, template.model, str(template.duration_s)]))
        for locale in plan.locales:
            if not _usable(template, locale):
                continue
            for ratio in plan.aspect_ratios:
                for variant in plan.variants:
                    out.append(Combination(template, locale, ratio, variant, variant.hook.get(locale, ""), render_sha))
    return out


def expand_product(
    product: ProductRecord, combos: list[Combination], *, tenant: str, catalog: str, image_sha256: str
) -> list[Expanded]:
    """All tasks of one (valid) product. Prompt and overlay depend on template, locale and hook only,
    so they are made once per product for all ratios; the identity's canonical JSON is written from
    pre-encoded parts (the same text as canonical_json(task_identity(...)), which a test checks)."""
    base = _fields(product, "")
    shared = f'"catalog":{_STR(catalog)},"image_sha256":{_STR(image_sha256)},'
    product_json, tenant_json = _STR(product.product_id), _STR(tenant)
    texts: dict[tuple[str, str, str], tuple[str, str, dict[str, str], str]] = {}
    out: list[Expanded] = []
    for c in combos:
        key = (c.template.id, c.locale, c.hook)
        text = texts.get(key)
        if text is None:
            fields = {**base, "hook": c.hook}
            prompt = c.template.prompts[c.locale].format(**fields)
            overlay = {field: fields[field] for field in OVERLAY_FIELDS}
            text = texts[key] = (prompt, sha256_text(prompt), overlay, overlay_sha256(overlay, c.template.version))
        prompt, prompt_sha, overlay, overlay_sha = text
        ratio, locale, template_version, variant = c.identity_parts
        identity_json = (
            f'{{"aspect_ratio":{ratio},{shared}"locale":{locale},"overlay_sha256":"{overlay_sha}",'
            f'"product_id":{product_json},"prompt_sha256":"{prompt_sha}","render_sha256":"{c.render_sha256}",'
            f'"template_version":{template_version},"tenant":{tenant_json},"variant":{variant}}}'
        )
        out.append(Expanded(c, task_id_of_json(identity_json), identity_json, prompt, prompt_sha, overlay, overlay_sha))
    return out


def expand(
    product: ProductRecord, plan: Plan, *, tenant: str, catalog: str, image_sha256: str
) -> Iterator[TaskSpec]:
    """All task specs for one (valid) product; locales a template cannot serve are skipped."""
    for e in expand_product(product, combinations(plan), tenant=tenant, catalog=catalog, image_sha256=image_sha256):
        c, template = e.combination, e.combination.template
        identity = task_identity(
            tenant=tenant, catalog=catalog, product_id=product.product_id, template_version=template.version,
            locale=c.locale, aspect_ratio=c.aspect_ratio, variant=c.variant.id, prompt_sha256=e.prompt_sha256,
            image_sha256=image_sha256, render_sha256=c.render_sha256, overlay_sha256=e.overlay_sha256,
        )
        yield TaskSpec(
            id=e.id, identity_json=e.identity_json, identity=identity, product_id=product.product_id,
            template_id=template.id, template_version=template.version, locale=c.locale, aspect_ratio=c.aspect_ratio,
            variant=c.variant.id, prompt=e.prompt, prompt_sha256=e.prompt_sha256, overlay=dict(e.overlay),
            duration_s=template.duration_s, provider=template.provider, model=template.model,
            estimated_cost=template.cost_estimate,
        )
