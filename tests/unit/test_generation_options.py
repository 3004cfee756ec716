"""A generation's optional fields (fallback routes, lock_model, priority): checked at the boundary, and
absent from a request's idempotency hash when not asked for, so a request sent before they existed
hashes as it did (a retry across an upgrade is not a 409)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from contracts.admission import PriorityClass
from contracts.routing import MAX_FALLBACKS
from control.generations import GenerationBody

BASE = {"prompt": "A lamp", "image_asset_id": "img-1"}


def test_a_request_without_the_options_normalises_as_before_them():
    assert set(GenerationBody(**BASE).normalised()) == {"prompt", "image_asset_id", "provider", "model",
                                                        "duration_s", "aspect_ratio"}


def test_the_options_asked_for_are_part_of_the_request():
    body = GenerationBody(**BASE, fallbacks=[{"provider": "runway", "model": "gen4_turbo"}], lock_model=True,
                          priority="bulk")
    assert body.normalised()["fallbacks"] == [{"provider": "runway", "model": "gen4_turbo"}]
    assert body.normalised()["lock_model"] is True and body.normalised()["priority"] == "bulk"
    assert body.priority is PriorityClass.BULK
    assert body.sha256() != GenerationBody(**BASE).sha256()


@pytest.mark.parametrize("fallbacks, why", [
    ([{"provider": "runway", "model": "gen4_turbo"}] * 2, "named twice"),
    ([{"provider": "runway", "model": f"m{i}"} for i in range(MAX_FALLBACKS + 1)], "at most"),
    ([{"provider": "runway"}], "model"),
    ([{"provider": "runway", "model": "gen4_turbo", "price": 0}], "price"),
])
def test_a_bad_fallback_list_is_refused_naming_why(fallbacks, why):
    with pytest.raises(ValidationError) as refused:
        GenerationBody(**BASE, fallbacks=fallbacks)
    assert why in str(refused.value)


def test_an_unknown_priority_is_refused():
    with pytest.raises(ValidationError):
        GenerationBody(**BASE, priority="urgent")
