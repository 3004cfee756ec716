"""Plan parsing, deterministic task identity, expansion counts."""

import hashlib
import json
from decimal import Decimal
from pathlib import Path

import pytest

from adapters.media.ffmpeg_tools import font_path
from catalog.bulk import copy_text
from catalog.expand import (
    OVERLAY_FONT,
    canonical_json,
    check_plan_locales,
    copy_issues,
    expand,
    overlay_json,
    sha256_text,
    task_id_for,
    task_identity,
)
from catalog.plan import PlanError, load_plan
from catalog.records import IssueAction, ProductRecord
from config.defaults import ProviderLimits
from contracts.admission import PlanLimits, effective_limits

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PINNED_UGC_DE_916 = "7137a848da34aab888c46e52651f920b"  # was e2f5c04d4c41d9cc4d7180326c147b39 before the overlay joined


def product(**kw) -> ProductRecord:
    base = dict(product_id="SKU-1", title="Lamp", description="A lamp", image_urls=["a.png"],
                price=Decimal("9.5"), currency="USD", category="Home", rows=[2])
    base.update(kw)
    return ProductRecord(**base)


def test_example_plan_expands_to_every_combination():
    plan = load_plan(EXAMPLES / "plan.toml")
    specs = list(expand(product(), plan, tenant="t", catalog="c", image_sha256="ab" * 32))
    assert len(specs) == plan.combinations == 8
    assert len({s.id for s in specs}) == 8
    assert {(s.template_id, s.locale, s.aspect_ratio) for s in specs} == {
        (t, loc, r) for t in ("showcase", "ugc-teaser") for loc in ("en-US", "de-DE") for r in ("9:16", "16:9")
    }
    de = next(s for s in specs if s.locale == "de-DE" and s.template_id == "showcase")
    assert "Preis 9.50 USD" in de.prompt and "Neu im Frühling" in de.prompt
    assert de.overlay == {"title": "Lamp", "price": "9.50 USD", "hook": "Neu im Frühling"}


def test_identity_is_stable_and_sensitive_to_what_changes_the_output():
    plan = load_plan(EXAMPLES / "plan.toml")
    first = [s.id for s in expand(product(), plan, tenant="t", catalog="c", image_sha256="0" * 64)]
    again = [s.id for s in expand(product(), plan, tenant="t", catalog="c", image_sha256="0" * 64)]
    assert first == again
    new_image = [s.id for s in expand(product(), plan, tenant="t", catalog="c", image_sha256="1" * 64)]
    new_title = [s.id for s in expand(product(title="Lamp 2"), plan, tenant="t", catalog="c",
                                      image_sha256="0" * 64)]
    other_tenant = [s.id for s in expand(product(), plan, tenant="u", catalog="c", image_sha256="0" * 64)]
    for changed in (new_image, new_title, other_tenant):
        assert not set(changed) & set(first)


def _ids(plan, **product_fields) -> dict[tuple[str, str, str], str]:
    specs = expand(product(**product_fields), plan, tenant="t", catalog="c", image_sha256="0" * 64)
    return {(s.template_id, s.locale, s.aspect_ratio): s.id for s in specs}


def test_a_price_change_changes_every_task_that_shows_the_price():
    """ugc-teaser's prompt has no {price}, but its overlay draws the price: its ids must change too."""
    plan = load_plan(EXAMPLES / "plan.toml")
    assert all("{price}" not in p for p in next(t for t in plan.templates if t.id == "ugc-teaser").prompts.values())
    before, after = _ids(plan, price=Decimal("9.50")), _ids(plan, price=Decimal("12.00"))
    assert before.keys() == after.keys() and len(before) == 8
    assert all(before[k] != after[k] for k in before), "a task kept its id across a price change"
    assert _ids(plan, price=Decimal("9.5")) == before  # the same price, written differently


def test_a_hook_change_changes_the_ids_of_that_locale_only():
    plan = load_plan(EXAMPLES / "plan.toml")
    before = _ids(plan)
    plan.variants[0].hook["de-DE"] = "Jetzt neu"
    after = _ids(plan)
    changed = {k for k in before if before[k] != after[k]}
    assert changed == {k for k in before if k[1] == "de-DE"}


def test_the_overlay_font_in_the_identity_is_the_font_installed():
    """Bumping the font package changes the pixels: OVERLAY_FONT must follow (and so every task id)."""
    name, digest = OVERLAY_FONT.split("@")
    path = font_path()
    assert path.name == name
    assert hashlib.sha256(path.read_bytes()).hexdigest().startswith(digest)


def test_the_identity_of_a_known_task_is_pinned():
    """Changing what goes into the identity re-identifies every task of every existing plan: a re-import
    then makes new tasks (and new videos). This pin makes such a change deliberate (docs/architecture.md)."""
    plan = load_plan(EXAMPLES / "plan.toml")
    assert _ids(plan)[("ugc-teaser", "de-DE", "9:16")] == PINNED_UGC_DE_916


def test_identity_hash_ignores_key_order():
    fields = dict(tenant="t", catalog="c", product_id="p", template_version="v", locale="en-US",
                  aspect_ratio="9:16", variant="a", prompt_sha256="x", image_sha256="y", render_sha256="z",
                  overlay_sha256="o")
    ident = task_identity(**fields)
    reordered = dict(reversed(list(ident.items())))
    assert task_id_for(ident) == task_id_for(reordered)
    assert len(task_id_for(ident)) == 32


@pytest.mark.parametrize("awkward", ['quote " and \\ backslash', "tab\tnew\nline\r",
                                     "Frühling \u65e5\u672c \U0001f600", "\x01ctl"])
def test_identity_text_is_the_canonical_json_of_the_identity(awkward):
    """The expansion writes the identity's JSON from pre-encoded parts: it must be exactly the
    canonical JSON task ids were always hashed from, whatever the text holds."""
    plan = load_plan(EXAMPLES / "plan.toml")
    specs = list(expand(product(product_id=awkward, title=awkward), plan, tenant=awkward, catalog=awkward,
                        image_sha256=awkward))
    assert len(specs) == 8
    for s in specs:
        assert s.identity_json == canonical_json(s.identity)
        assert s.id == task_id_for(s.identity)
        assert s.identity["product_id"] == s.identity["tenant"] == s.identity["catalog"] == awkward
        lines = [s.overlay[f] for f in ("title", "price", "hook")]
        assert s.identity["overlay_sha256"] == sha256_text(canonical_json(
            {"lines": lines, "template_version": s.template_version, "font": OVERLAY_FONT}))
        assert overlay_json(s.overlay) == json.dumps(s.overlay, ensure_ascii=False, separators=(",", ":"))


def test_copy_text_escapes_what_copy_would_misread():
    assert copy_text(None) == "\\N"
    assert copy_text(Decimal("3")) == "3"
    assert copy_text("plain") == "plain"
    assert copy_text('a\\b\tc\nd\re"') == 'a\\\\b\\tc\\nd\\re"'


def test_unsupported_locale_marks_the_expansion_invalid(tmp_path):
    text = (EXAMPLES / "plan.toml").read_text().replace('locales = ["en-US", "de-DE"]',
                                                          'locales = ["en-US", "fr-FR", "english"]')
    path = tmp_path / "plan.toml"
    path.write_text(text)
    plan = load_plan(path)
    issues = check_plan_locales(plan)
    assert {(i.value, i.action) for i in issues} == {("fr-FR", IssueAction.EXPANSION_INVALID),
                                                      ("english", IssueAction.EXPANSION_INVALID)}
    specs = list(expand(product(), plan, tenant="t", catalog="c", image_sha256="0" * 64))
    assert {s.locale for s in specs} == {"en-US"}


def test_long_copy_goes_to_review():
    plan = load_plan(EXAMPLES / "plan.toml")
    issues = copy_issues(product(title="x" * 61), plan)
    assert issues and all(i.action is IssueAction.COPY_REVIEW and i.field == "title" for i in issues)
    assert copy_issues(product(), plan) == []


@pytest.mark.parametrize("body, needle", [
    ("name = 'x'", "locales"),
    ("not toml = = =", "not valid TOML"),
])
def test_bad_plans_are_reported(tmp_path, body, needle):
    path = tmp_path / "plan.toml"
    path.write_text(body)
    with pytest.raises(PlanError, match=needle):
        load_plan(path)


def test_unknown_prompt_field_is_refused(tmp_path):
    text = (EXAMPLES / "plan.toml").read_text().replace("{category}", "{colour}")
    path = tmp_path / "plan.toml"
    path.write_text(text)
    with pytest.raises(PlanError, match="colour"):
        load_plan(path)


def test_run_wait_stops_for_tasks_nothing_will_move():
    """INVALID or NEEDS_ATTENTION tasks end `run --wait` at once instead of waiting for its timeout."""
    from cli.starting import wait_with_progress

    reads: list[int] = []

    def settled() -> dict[str, int]:
        reads.append(1)
        return {"SUCCEEDED": 2, "INVALID": 3, "NEEDS_ATTENTION": 1}

    assert wait_with_progress(settled, 6, show=False, timeout_s=30, poll_s=5)["INVALID"] == 3
    assert len(reads) == 1  # no second look: nothing was left to wait for
    running = {"SUCCEEDED": 2, "RUNNING": 1}
    reads.clear()

    def busy() -> dict[str, int]:
        reads.append(1)
        return running

    assert wait_with_progress(busy, 3, show=False, timeout_s=0.25, poll_s=0.1) == running
    assert len(reads) > 1  # a running task is waited for (here until the timeout)


def test_limits_and_deadlines_come_from_the_plan(tmp_path):
    text = (EXAMPLES / "plan.toml").read_text() + (
        "\n[deadlines]\ntask_hours = 2\njob_minutes = 10\n"
        "\n[providers.emulator]\nmax_concurrent = 7\nsubmits_per_minute = 120\n"
    )
    path = tmp_path / "plan.toml"
    path.write_text(text)
    plan = load_plan(path)
    assert plan.limits_for("emulator") == PlanLimits(max_concurrent=7, submits_per_minute=120)
    assert plan.limits_for("runway") is None
    assert (plan.deadlines.task_hours, plan.deadlines.job_minutes) == (2, 10)
    assert plan.plan_id != load_plan(EXAMPLES / "plan.toml").plan_id  # a changed limit is a new plan


def test_plans_without_operational_sections_keep_their_id():
    """Adding optional sections to the plan model must not re-identify the plans users already imported."""
    assert load_plan(EXAMPLES / "plan.toml").plan_id == (
        "5499df4e0a9e5590179fa99d9946802c6b3adcd535fc9850d4c1c8e2a83479e9")


@pytest.mark.parametrize("section, needle", [
    ("[providers.runwy]\nmax_concurrent = 5", "no template uses"),
    ("[providers.emulator]\nmax_concurent = 5", "max_concurent"),
    ("[providers.emulator]\nmax_concurrent = 0", "max_concurrent"),
    ("[deadlines]\ntask_hours = -1", "task_hours"),
])
def test_bad_limit_sections_are_refused(tmp_path, section, needle):
    path = tmp_path / "plan.toml"
    path.write_text((EXAMPLES / "plan.toml").read_text() + "\n" + section + "\n")
    with pytest.raises(PlanError, match=needle):
        load_plan(path)


@pytest.mark.parametrize("configured, plan, expected", [
    (None, None, (20, None)),  # nothing said anywhere: the default
    (None, PlanLimits(max_concurrent=7), (7, None)),  # only the plan speaks
    (ProviderLimits(max_concurrent=50, submits_per_minute=600), None, (50, 600)),
    (ProviderLimits(max_concurrent=50, submits_per_minute=600), PlanLimits(max_concurrent=7, submits_per_minute=120),
     (7, 120)),  # a plan may ask for less ...
    (ProviderLimits(max_concurrent=5), PlanLimits(max_concurrent=40, submits_per_minute=60), (5, 60)),  # never more
    (ProviderLimits(max_concurrent=5, submits_per_minute=30), PlanLimits(submits_per_minute=60), (5, 30)),
])
def test_configuration_is_the_ceiling_a_plan_may_lower(configured, plan, expected):
    limits = effective_limits(configured, plan)
    assert (limits.max_concurrent, limits.submits_per_minute) == expected
