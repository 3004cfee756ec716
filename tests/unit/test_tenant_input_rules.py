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
from contracts.tenant_text import unsafe_in
from control.imports import ImportRequest, plan_of
from gateway.problems import ProblemError
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
    assert _decode_cursor(_encode_cursor(at, "ab" * 16)) == (at, "ab" * 16)
    for raw in (b"[" * 3000, b'[["2026-01-01"], "x"]', b'["2026-01-01", 5]', b"{}", b"\xff"):
        with pytest.raises(ProblemError):
            _decode_cursor(base64.urlsafe_b64encode(raw).decode().rstrip("="))


def test_control_characters_are_found_wherever_they_sit_in_a_body() -> None:
    assert unsafe_in({"prompt": "tab\tand\nlines\r are fine", "n": 3, "ok": [True, None]}) is None
    assert unsafe_in({"prompt": "a\x00b"}) == "prompt"
    assert unsafe_in({"plan": {"templates": [{"prompts": {"en": "x\x07"}}]}}) == "plan.templates.0.prompts.en"
    assert unsafe_in({"k\x1b": "v"}) == "k\\x1b"
    assert unsafe_in("\x7f") == ""
    assert unsafe_in({"prompt": ["ok", "lone \ud800"]}) == "prompt.1"
    assert unsafe_in({"title": "ok \u202eevorppa"}) == "title" and unsafe_in({"t": "csi \x9b"}) == "t"
    assert unsafe_in({"title": "\u05e9\u05dc\u05d5\u05dd \u200f!"}) is None  # a right-to-left mark stays


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


def _b64(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode("utf-8", "surrogatepass")).decode().rstrip("=")


@pytest.mark.parametrize("raw", [r'["2020-01-01T00:00:00","\u0000"]', r'["2020-01-01T00:00:00","\ud800"]',
                                 r'["2026-01-01T00:00:00+00:00","ab\u001b"]', '["2026-01-01T00:00:00+00:00",""]',
                                 '["2026-01-01T00:00:00+00:00","' + "a" * 65 + '"]',
                                 '["2026-01-01T00:00:00+00:00","\' OR 1=1 --"]'])
def test_a_cursor_names_a_task_id_or_is_refused(raw: str) -> None:
    """Issue 44.6: valid base64 of hostile JSON. The id reached Postgres as it was (a NUL or a lone
    surrogate: 500 and a dropped connection); only the encoder's shape is taken."""
    with pytest.raises(ProblemError) as refused:
        _decode_cursor(_b64(raw))
    assert refused.value.problem.status == 400 and "cursor" in refused.value.problem.detail


_TOML_ESCAPES = [
    ("name", ('name = "t"', r'name = "x\u0000y"')),
    ("name", ('name = "t"', r'name = "p\u001b[41mPLAN\u001b[0m"')),
    ("name", ('name = "t"', r'name = "ok \u202eevorppa\u202c"')),
    ("templates.0.id", ('id = "tpl"', r'id = "t\u0007pl"')),
    ("templates.0.model", ('version = "v1"', 'version = "v1"\nmodel = "emu\\u0008"')),
    ("templates.0.prompts.en-US", ("Shot of", r"Shot\u001b[2J of")),
    ("templates.0.prompts", ('[templates.prompts]\n"en-US"', '[templates.prompts]\n"en\\u0000US"')),
    ("variants.0.hook", ('hook = { "en-US"', r'hook = { "en-\u001bUS"')),
    ("variants.0.hook.en-US", ('"Hook"', r'"Ho\u0008ok"')),
    ("variants.0.hook.en-US", ('"Hook"', r'"Hook \u2066x\u2069"')),
]


@pytest.mark.parametrize(("field", "change"), _TOML_ESCAPES)
def test_a_plans_toml_escapes_cannot_write_a_control_character(field: str, change: tuple[str, str]) -> None:
    """Issue 44.7: the body's JSON check sees `\\u0000` as six printable characters; the parsed plan
    holds the NUL (Postgres refused it: a 500). Refused naming the field, for every plan source."""
    text = _plan().replace(*change)
    assert text != _plan()
    with pytest.raises(PlanError, match=f"{field}[^ ]*: contains"):
        parse_plan(text)
    request = ImportRequest(asset_id="ast_" + "0" * 32, plan=text)
    with pytest.raises(PlanError):
        plan_of(request, credits_per_second=1)


def _catalog(tmp_path, rows: str) -> list:
    from catalog.readers import read_catalog

    path = tmp_path / "c.csv"
    path.write_text("product_id,title,description,image_url,price,currency,category\n" + rows, encoding="utf-8")
    read = read_catalog(path)
    return [list(read.products), read.issues]


def test_catalog_values_past_their_columns_are_row_issues(tmp_path) -> None:
    """Issue 44.8: a product id of 301 characters (products.product_id is varchar(300)) and a price
    past Numeric(20, 6) were written as they were (a 500); at the column's size they are taken."""
    from schema.models import Product, ValidationIssue

    assert Product.product_id.type.length == ValidationIssue.product_id.type.length == 300
    at, past = "P" * 300, "Q" * 301
    products, issues = _catalog(tmp_path, f"{at},Lamp,d,https://e.com/a.png,99999999999999.99,USD,Home\n"
                                          f"{past},Lamp,d,https://e.com/a.png,1,USD,Home\n"
                                          "P-3,Lamp,d,https://e.com/a.png,1000000000000000,USD,Home\n")
    assert [(p.product_id, p.price) for p in products] == [(at, Decimal("99999999999999.99")), ("P-3", None)]
    too_long = [i for i in issues if i.field == "product_id"]
    assert [(i.action, i.row) for i in too_long] == [(IssueAction.ROW_INVALID, 3)], issues
    assert "301 characters" in too_long[0].reason and len(too_long[0].product_id or "") <= 300
    (price,) = [i for i in issues if i.field == "price"]
    assert price.action == IssueAction.REJECTED and "too large" in price.reason
    for issue in issues:  # every issue fits its own row
        assert len(issue.field) <= ValidationIssue.field.type.length and len(issue.product_id or "") <= 300


@pytest.mark.parametrize("cell", ["p\x1b[41mPLAN\x1b[0m", "bell\x07", "back\x08space", "ok \u202eevorppa\u202c",
                                  "csi\x9b2J"])
def test_a_catalog_cell_with_a_control_or_bidi_character_makes_its_row_invalid(tmp_path, cell: str) -> None:
    """Issue 44.10/11: ESC, BEL, backspace and bidi overrides in a product id or title reached the
    operator's terminal and pages as written; the row is invalid, naming the character."""
    for rows in (f"{cell},Lamp,d,https://e.com/a.png,1,USD,Home\n", f"P-1,{cell},d,https://e.com/a.png,1,USD,Home\n"):
        products, issues = _catalog(tmp_path, rows + "P-2,Vase,d,https://e.com/b.png,1,USD,Home\n")
        assert [p.product_id for p in products] == ["P-2"]
        (issue,) = issues
        assert issue.action == IssueAction.ROW_INVALID and "U+" in issue.reason, issue


def test_a_plan_duration_is_at_least_a_millisecond_as_the_api_says() -> None:
    """Also seen in issue 44: `duration_s = 1E-7` was taken at import; POST /v1/generations refuses it."""
    from control.generations import GenerationBody

    with pytest.raises(ValueError, match="millisecond"):
        GenerationBody(prompt="a lamp", image_asset_id="ast_x", duration_s=1e-7)
    with pytest.raises(PlanError, match="millisecond"):
        parse_plan(_plan(duration="1E-7"))
    assert parse_plan(_plan(duration="0.001")).templates[0].duration_s == Decimal("0.001")


@pytest.mark.parametrize("prompt", ["\u200b", " \u200b\u200d\ufeff ", "\u2060"])
def test_a_prompt_of_invisible_characters_is_empty(prompt: str) -> None:
    """Also seen in issue 44: a prompt of only U+200B counted as non-empty."""
    from control.generations import GenerationBody

    with pytest.raises(ValueError, match="empty"):
        GenerationBody(prompt=prompt, image_asset_id="ast_x")
    with pytest.raises(PlanError, match="empty"):
        parse_plan(_plan(prompt=prompt))


def test_the_cli_shows_tenant_text_as_escapes_and_keeps_json_values(capsys) -> None:
    """Issue 44.10 as pure logic (the commands on the real stack: test_api_tenant_input.py)."""
    import json

    from cli.output import emit_json, said
    from contracts.tenant_text import UNSAFE

    hostile = "p\x1b[41mX\x07\x08\u202ey[b]z\x9b\ud800"
    emit_json({"product_id": hostile})
    out = capsys.readouterr().out
    assert UNSAFE.search(out) is None and json.loads(out)["product_id"] == hostile
    assert said(hostile) == "p\\x1b[41mX\\x07\\x08\\u202ey\\[b]z\\x9b\\ud800"
