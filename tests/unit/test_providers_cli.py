"""`reelqueue providers` and `providers check` without a stack, and validation of a task routed to
a provider that is not configured."""

from __future__ import annotations

import json
import os
import socket
from decimal import Decimal

import pytest

from activities.tasks import _invalid_reason
from adapters.providers import build_providers
from config.settings import Settings
from schema.models import Task


def test_listing_names_every_provider_and_what_is_missing(cli):
    out = cli("providers", "--json", REELQUEUE_RUNWAY_API_KEY="rk-listed-secret")
    assert out.exit_code == 0
    providers = json.loads(out.stdout)["providers"]
    assert set(providers) == {"emulator", "runway", "replicate", "kling", "luma", "fal"}
    assert providers["runway"]["configured"] and providers["runway"]["base_url"] == "https://api.dev.runwayml.com"
    assert providers["replicate"]["missing_setting"] == "REELQUEUE_REPLICATE_API_KEY"
    assert providers["kling"]["missing_setting"] == "REELQUEUE_KLING_API_KEY"
    assert providers["runway"]["capabilities"]["min_poll_interval_s"] == 5.0
    assert providers["luma"]["prices_credits_per_s"]["ray-2"] > 0
    assert "rk-listed-secret" not in out.stdout
    assert "set REELQUEUE_FAL_API_KEY" in cli("providers").stdout


def test_check_says_when_the_network_is_unreachable_or_the_key_missing(cli):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens here
    out = cli("providers", "check", "luma", "--json", REELQUEUE_LUMA_API_KEY="luma-secret-abcdef",
              REELQUEUE_LUMA_BASE_URL=f"http://127.0.0.1:{port}")
    result = json.loads(out.stdout)
    assert out.exit_code == 1 and not result["ok"] and not result["reachable"]
    assert "network unreachable" in result["detail"] and "luma-secret-abcdef" not in out.stdout
    missing = cli("providers", "check", "runway")
    assert missing.exit_code == 2 and "REELQUEUE_RUNWAY_API_KEY" in missing.stderr
    unknown = cli("providers", "check", "sora", "--json")
    assert unknown.exit_code == 2 and "unknown hosted provider" in json.loads(unknown.stdout)["error"]


def _task(provider: str, model: str, duration_s: float) -> Task:
    return Task(id="t1", provider=provider, model=model, aspect_ratio="9:16", duration_s=Decimal(str(duration_s)),
                prompt="A lamp", image_asset_id=None)


@pytest.mark.parametrize(("settings", "task", "reason"), [
    ({}, _task("runway", "gen4_turbo", 5), "set REELQUEUE_RUNWAY_API_KEY"),
    ({"kling_api_key": "ak"}, _task("kling", "kling-v2-1", 5), "set REELQUEUE_KLING_SECRET_KEY"),
    ({"runway_api_key": "k"}, _task("runway", "gen9", 5), "has no model 'gen9'"),
    ({"luma_api_key": "k"}, _task("luma", "ray-2", 7), "offers durations [5.0, 9.0] s"),
    # Every provider check passes; what is left is the image check (no image stored in this test).
    ({"emulate_providers": True}, _task("fal", "fal-ai/kling-video/v2.1/standard/image-to-video", 5),
     "no input image stored"),
])
def test_validation_refuses_what_the_provider_cannot_do(settings, task, reason, tmp_path, monkeypatch):
    for key in [k for k in os.environ if k.startswith("REELQUEUE_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("REELQUEUE_HOME", str(tmp_path))  # no stack.json of a running dev stack
    provider = build_providers(Settings(**settings))[task.provider]
    found = _invalid_reason(task, provider, None, storage=None)
    assert reason in found
