"""The polling budget's setting: `polls_per_second` in REELQUEUE_PROVIDER_LIMITS, per provider,
absent meaning no budget."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from config.defaults import ProviderLimits
from config.settings import Settings


def test_polls_per_second_is_read_per_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REELQUEUE_PROVIDER_LIMITS",
                       '{"emulator": {"max_concurrent": 300, "polls_per_second": 20}, "runway": {"max_concurrent": 5}}')
    limits = Settings().provider_limits
    assert limits["emulator"].polls_per_second == 20 and limits["emulator"].max_concurrent == 300
    assert limits["runway"].polls_per_second is None  # unset: no budget
    assert ProviderLimits().polls_per_second is None


@pytest.mark.parametrize("rate", [0, -1, 1001])
def test_a_budget_out_of_range_is_refused(rate: float) -> None:
    with pytest.raises(ValidationError, match="polls_per_second"):
        ProviderLimits(polls_per_second=rate)

