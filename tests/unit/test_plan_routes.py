"""A template's fallback routes and lock_model (catalog/plan.py): parsed, checked against the
deployment's providers, refused through the real CLI with exit 2 naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from catalog.plan import PlanError, parse_plan
from contracts.routing import Route

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PLAN = (EXAMPLES / "plan.toml").read_text()


def with_routes(lines: str) -> str:
    """The example plan with `lines` added to its first template."""
    head, sep, rest = PLAN.partition('model = "emu-motion-1"\n')
    return head + sep + lines + rest


def test_a_template_names_its_fallbacks_in_order_and_may_lock_its_model():
    plan = parse_plan(with_routes('fallbacks = [{ provider = "runway", model = "gen4_turbo" }, '
                                  '{ provider = "luma", model = "ray-2" }]\nlock_model = true\n'))
    template = plan.templates[0]
    assert template.routes() == [Route(provider="emulator", model="emu-motion-1"),
                                 Route(provider="runway", model="gen4_turbo"), Route(provider="luma", model="ray-2")]
    assert template.lock_model is True


def test_a_plan_without_routes_keeps_its_id():
    """The new fields are absent unless set, so every existing plan hashes as before."""
    canonical = parse_plan(PLAN).canonical_json()
    assert "fallbacks" not in canonical and "lock_model" not in canonical
    assert parse_plan(with_routes("lock_model = true\n")).plan_id != parse_plan(PLAN).plan_id


@pytest.mark.parametrize(("lines", "message"), [
    ('fallbacks = [{ provider = "emulator", model = "emu-motion-1" }]\n', "fallbacks[0] repeats the route"),
    ('fallbacks = [{ provider = "runway", model = "gen4_turbo" }, { provider = "runway", model = "gen4_turbo" }]\n',
     "fallbacks[1] repeats the route runway/gen4_turbo"),
    ('fallbacks = [{ provider = "runway" }]\n', "fallbacks.0.model"),
    ('fallbacks = [{ provider = "runway", model = "gen4_turbo", region = "eu" }]\n', "fallbacks.0.region"),
    ("fallbacks = [" + ", ".join(f'{{ provider = "p{i}", model = "m" }}' for i in range(5)) + "]\n",
     "at most 4 items"),
])
def test_malformed_routes_are_refused_naming_the_field(lines, message):
    with pytest.raises(PlanError, match="is invalid") as refused:
        parse_plan(with_routes(lines))
    assert message in str(refused.value)


@pytest.mark.parametrize(("route", "field", "message"), [
    ('{ provider = "nosuch", model = "x" }', "templates[0].fallbacks[0].provider", "no provider 'nosuch'"),
    ('{ provider = "runway", model = "gen9" }', "templates[0].fallbacks[0].model", "runway has no model 'gen9'"),
])
def test_the_cli_refuses_an_unknown_fallback_with_exit_2_naming_the_field(cli, tmp_path, route, field, message):
    plan = tmp_path / "plan.toml"
    plan.write_text(with_routes(f"fallbacks = [{route}]\n"))
    result = cli("import", str(EXAMPLES / "catalog.csv"), "--plan", str(plan), "--dry-run", "--json",
                 "--no-check-urls")
    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout)["error"]
    assert f"{field}: " in error and message in error


def test_the_cli_takes_a_known_fallback(cli, tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text(with_routes('fallbacks = [{ provider = "runway", model = "gen4_turbo" }]\n'))
    result = cli("import", str(EXAMPLES / "catalog.csv"), "--plan", str(plan), "--dry-run", "--json",
                 "--no-check-urls")
    assert result.exit_code == 0, result.output
