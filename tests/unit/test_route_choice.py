"""The choice of a route before a paid attempt (contracts/routing.py): health, capability, price, the
lock, and never a second route while a job of the task may exist."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from contracts.admission import BreakerMode
from contracts.routing import Route, RouteFacts, SkipReason, choose_route

EMU, RUNWAY, LUMA = Route(provider="emulator", model="emu-motion-1"), Route(provider="runway", model="gen4_turbo"), \
    Route(provider="luma", model="ray-2")


def facts(route: Route, **kw) -> RouteFacts:
    return RouteFacts(route=route, price=kw.pop("price", 10.0), **kw)


def test_a_healthy_primary_is_taken_and_nothing_is_skipped():
    choice = choose_route([facts(EMU), facts(RUNWAY)], reserved=10, spendable=0)
    assert (choice.route, choice.extra_reserve, choice.skipped, choice.waits) == (EMU, 0.0, [], False)
    assert choice.note() == "emulator/emu-motion-1"


def test_an_open_breaker_sends_the_attempt_to_the_first_healthy_fallback():
    choice = choose_route([facts(EMU, breaker=BreakerMode.OPEN), facts(RUNWAY)], reserved=10, spendable=0)
    assert choice.route == RUNWAY
    assert [(s.route, s.reason) for s in choice.skipped] == [(EMU, SkipReason.UNHEALTHY)]
    assert "emulator/emu-motion-1 skipped (unhealthy: breaker open)" in choice.note()


@pytest.mark.parametrize(("probe_free", "taken"), [(True, EMU), (False, RUNWAY)])
def test_half_open_is_healthy_only_with_room_for_its_probe(probe_free, taken):
    choice = choose_route([facts(EMU, breaker=BreakerMode.HALF_OPEN, probe_free=probe_free), facts(RUNWAY)],
                          reserved=10, spendable=0)
    assert choice.route == taken


def test_a_route_that_cannot_make_the_video_is_skipped_with_its_reason():
    choice = choose_route([facts(EMU, breaker=BreakerMode.OPEN), facts(LUMA, problem="luma does not render 9:16"),
                           facts(RUNWAY)], reserved=10, spendable=0)
    assert choice.route == RUNWAY
    assert [(s.route, s.reason, s.detail) for s in choice.skipped] == [
        (EMU, SkipReason.UNHEALTHY, "breaker open"), (LUMA, SkipReason.UNSUPPORTED, "luma does not render 9:16")]


def test_a_dearer_fallback_asks_for_the_difference_when_the_tenant_can_pay():
    choice = choose_route([facts(EMU, breaker=BreakerMode.OPEN), facts(RUNWAY, price=25.0)], reserved=10,
                          spendable=15)
    assert (choice.route, choice.extra_reserve) == (RUNWAY, 15.0)


def test_a_dearer_fallback_the_tenant_cannot_pay_is_skipped_and_the_task_waits_on_its_primary():
    choice = choose_route([facts(EMU, breaker=BreakerMode.OPEN), facts(RUNWAY, price=25.0)], reserved=10,
                          spendable=14.99)
    assert (choice.route, choice.waits, choice.extra_reserve) == (EMU, True, 0.0)
    assert [s.reason for s in choice.skipped] == [SkipReason.UNHEALTHY, SkipReason.UNAFFORDABLE]


def test_a_cheaper_fallback_needs_no_more_credit():
    choice = choose_route([facts(EMU, breaker=BreakerMode.OPEN), facts(RUNWAY, price=4.0)], reserved=10, spendable=0)
    assert (choice.route, choice.extra_reserve) == (RUNWAY, 0.0)


def test_lock_model_waits_on_the_primary_and_names_every_fallback_as_locked():
    choice = choose_route([facts(EMU, breaker=BreakerMode.OPEN), facts(RUNWAY)], reserved=10, spendable=100,
                          lock_model=True)
    assert (choice.route, choice.waits) == (EMU, True)
    assert [(s.route, s.reason) for s in choice.skipped] == [(EMU, SkipReason.UNHEALTHY), (RUNWAY, SkipReason.LOCKED)]


def test_a_task_whose_job_may_exist_keeps_its_route_whatever_the_breakers_say():
    """An unknown submit on A while A's breaker opens: the next attempt stays on A (it reconciles
    first), never on B."""
    choice = choose_route([facts(EMU, breaker=BreakerMode.OPEN), facts(RUNWAY)], reserved=10, spendable=100,
                          current=EMU, job_may_exist=True)
    assert (choice.route, choice.pinned, choice.skipped) == (EMU, True, [])
    assert "kept: a job of this task may exist there" in choice.note()


def test_a_fallback_keeps_its_route_too_once_its_job_may_exist():
    choice = choose_route([facts(EMU), facts(RUNWAY)], reserved=10, spendable=0, current=RUNWAY, job_may_exist=True)
    assert choice.route == RUNWAY


def test_no_candidates_is_a_programming_error():
    with pytest.raises(ValueError, match="no route"):
        choose_route([], reserved=0, spendable=0)


def test_a_route_names_a_provider_and_a_model_and_nothing_else():
    with pytest.raises(ValidationError):
        Route.model_validate({"provider": "runway", "model": "gen4_turbo", "region": "eu"})
    with pytest.raises(ValidationError):
        Route.model_validate({"provider": "runway", "model": ""})


def test_no_usable_route_waits_on_the_route_the_task_holds_not_on_the_primary():
    """On a fallback whose breaker opened after the primary's: the task stays where its row says it is."""
    choice = choose_route([facts(EMU, breaker=BreakerMode.OPEN), facts(RUNWAY, breaker=BreakerMode.OPEN)],
                          reserved=10, spendable=100, current=RUNWAY)
    assert (choice.route, choice.waits, choice.extra_reserve) == (RUNWAY, True, 0.0)
