"""The admission layers' configuration: the `models` table of REELQUEUE_PROVIDER_LIMITS and the
platform's total, and which layer a gate's name belongs to."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from config.settings import Settings
from contracts import workflow_api as api

LIMITS = '{"runway": {"max_concurrent": 20, "models": {"gen4_turbo": {"max_concurrent": 5}}}}'


def test_a_model_with_a_limit_has_a_layer_and_others_have_none(monkeypatch):
    monkeypatch.setenv("REELQUEUE_PROVIDER_LIMITS", LIMITS)
    monkeypatch.setenv("REELQUEUE_PLATFORM_MAX_CONCURRENT", "50")
    layers = Settings().admission_layers()
    assert layers.platform == 50
    assert layers.model("runway", "gen4_turbo") == 5
    assert layers.model("runway", "gen3a_turbo") is None and layers.model("kling", "gen4_turbo") is None


def test_no_platform_total_is_no_platform_layer(monkeypatch):
    monkeypatch.delenv("REELQUEUE_PLATFORM_MAX_CONCURRENT", raising=False)
    assert Settings().admission_layers().platform is None


@pytest.mark.parametrize("bad", ['{"runway": {"models": {"gen4_turbo": {"max_concurrent": 0}}}}',
                                 '{"runway": {"models": {"gen4_turbo": {}}}}'])
def test_a_model_limit_must_be_a_positive_count(monkeypatch, bad):
    monkeypatch.setenv("REELQUEUE_PROVIDER_LIMITS", bad)
    with pytest.raises(ValidationError, match="max_concurrent"):
        Settings()


def test_each_gate_name_belongs_to_one_layer():
    assert api.gate_layer(api.PLATFORM_GATE) == "platform"
    assert api.gate_layer(api.tenant_gate("acme")) == "tenant"
    assert api.gate_layer(api.model_gate("runway", "gen4_turbo")) == "model"
    assert api.gate_layer("runway") == "provider"
