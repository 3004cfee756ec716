"""The rules for a tenant's input as pure logic: prompt templates, plan bounds, what a tenant's plan
becomes at the edge, the cursor decoder, control characters in bodies (the real stack:
tests/integration/test_api_tenant_input.py)."""

from __future__ import annotations

import base64
from decimal import Decimal

import pytest

from activities.tasks import _lowest
from catalog.expand import copy_issues
from catalog.plan import MAX_PROMPT_CHARS, PlanError, parse_plan, prompt_parts, read_toml
from catalog.records import IssueAction, ProductRecord
from control.imports import ImportRequest, plan_of
from gateway.problems import ProblemError
from gateway.v1 import _control_in
from gateway.v1.generations import _decode_cursor, _encode_cursor

PLAN = """
name = "t"
locales = ["en-US"]
aspect_ratios = ["9:16"]
[[variants]]
id = "a"
hook = {{ "en-US" = "Hook" }}
[[templates]]
id = "tpl"
version = "v1"
duration_s = {duration}
cost_estimate = {cost}
[templates.prompts]
"en-US" = "{prompt}"
{extra}
"""


def _plan(prompt: str = "Shot of {title}", duration: str = "2", cost: str = "0", extra: str = "") -> str:
    return PLAN.format(prompt=prompt, duration=duration, cost=cost, extra=extra)


@pytest.mark.parametrize("text", ["{title}", "{title} costs {price}. {hook}", "braces {{ and }} stay", "no field"])
def test_plain_placeholders_are_a_template(text: str) -> None:
    literal, names = prompt_parts(text)
    assert literal + sum(len("{" + n + "}") for n in names) >= len(text.replace("{{", "{").replace("}}", "}"))


@pytest.mark.parametrize(("text", "said"), [
    ("{title:>5000000}", "format spec"), ("{title!r}", "conversion"), ("{title.nope}", "is not one of"),
    ("{title[0]}", "is not one of"), ("{0}", "is not one of"), ("{}", "is not one of"),
    ("{secret}", "is not one of"), ("a } b", "brace"), ("{title", "brace"),
])
def test_anything_else_is_refused_naming_it(text: str, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        prompt_parts(text)
    with pytest.raises(PlanError, match="template tpl: prompt for en-US"):
        parse_plan(_plan(prompt=text))


@pytest.mark.parametrize(("field", "value"), [
    ("duration", "0"), ("duration", "601"), ("cost", "-1"), ("cost", "1e9"),
    ("extra", "[providers.emulator]\nmax_concurrent = 1000000"), ("extra", "[review]\nduration_tolerance_s = 1e9"),
])
def test_numeric_fields_are_bounded(field: str, value: str) -> None:
    with pytest.raises(PlanError):
        parse_plan(_plan(**{field: value}))


def test_a_prompt_longer_than_the_cap_once_filled_in_goes_to_copy_review() -> None:
    plan = parse_plan(_plan(prompt="{description} {description}"))
    plan.templates[0].max_description_chars = 10_000
    short = ProductRecord(product_id="p", title="t", description="x" * 100, rows=[2])
    long = ProductRecord(product_id="p", title="t", description="x" * (MAX_PROMPT_CHARS // 2 + 1), rows=[2])
    assert copy_issues(short, plan) == []
    (issue,) = copy_issues(long, plan)
    assert (issue.field, issue.action) == ("prompt", IssueAction.COPY_REVIEW)
    assert f"at most {MAX_PROMPT_CHARS}" in issue.reason


def test_a_tenant_plan_costs_the_server_price_and_asks_only_for_its_own_slots() -> None:
    text = _plan(cost="0", duration="2.5", extra="[providers.emulator]\nmax_concurrent = 2")
    request = ImportRequest(asset_id="ast_" + "0" * 32, plan=text)
    plan = plan_of(request, credits_per_second=1.5)
    assert plan.templates[0].cost_estimate == Decimal("3.75")
    assert plan.limits_for("emulator") is None and plan.own_limit("emulator") == 2
    assert plan_of(request, credits_per_second=1.5).plan_id == plan.plan_id
    as_json = ImportRequest(asset_id=request.asset_id, plan=read_toml(text))
    assert plan_of(as_json, credits_per_second=1.5).own_limit("emulator") == 2
    for extra, said in (("[providers.emulator]\nsubmits_per_minute = 1", "submits_per_minute"),
                        ("[tenant_limits.emulator]\nmax_concurrent = 1", "tenant_limits")):
        with pytest.raises(PlanError, match=said):
            plan_of(ImportRequest(asset_id=request.asset_id, plan=_plan(extra=extra)), credits_per_second=1)
    assert _lowest(None, None) is None and _lowest(4, None) == 4 and _lowest(4, 2) == 2 and _lowest(None, 3) == 3


def test_an_operator_plan_keeps_its_estimate_and_provider_limits() -> None:
    plan = parse_plan(_plan(cost="7", extra="[providers.emulator]\nmax_concurrent = 3\nsubmits_per_minute = 60"))
    assert plan.templates[0].cost_estimate == 7
    assert plan.limits_for("emulator").submits_per_minute == 60 and plan.own_limit("emulator") is None


def test_the_cursor_decoder_takes_only_what_the_encoder_wrote() -> None:
    from datetime import UTC, datetime

    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert _decode_cursor(_encode_cursor(at, "abc")) == (at, "abc")
    for raw in (b"[" * 3000, b'[["2026-01-01"], "x"]', b'["2026-01-01", 5]', b"{}", b"\xff"):
        with pytest.raises(ProblemError):
            _decode_cursor(base64.urlsafe_b64encode(raw).decode().rstrip("="))


def test_control_characters_are_found_wherever_they_sit_in_a_body() -> None:
    assert _control_in({"prompt": "tab\tand\nlines\r are fine", "n": 3, "ok": [True, None]}) is None
    assert _control_in({"prompt": "a\x00b"}) == "prompt"
    assert _control_in({"plan": {"templates": [{"prompts": {"en": "x\x07"}}]}}) == "plan.templates.0.prompts.en"
    assert _control_in({"k\x1b": "v"}) == "k?"
    assert _control_in("\x7f") == ""
    assert _control_in({"prompt": ["ok", "lone \ud800"]}) == "prompt.1"


def test_a_catalog_row_with_a_nul_is_invalid_not_a_database_error(tmp_path) -> None:
    from catalog.readers import read_catalog

    path = tmp_path / "c.csv"
    path.write_bytes(b"product_id,title,description,image_url,price,currency,category\n"
                     b"N-1,La\x00mp,A lamp,https://example.com/a.png,1,USD,Home\n"
                     b"N-2,Vase,A vase,https://example.com/b.png,1,USD,Home\n")
    read = read_catalog(path)
    assert [p.product_id for p in read.products] == ["N-2"]
    (issue,) = read.issues
    assert (issue.row, issue.action) == (2, IssueAction.ROW_INVALID) and "NUL" in issue.reason
