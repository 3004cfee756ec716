"""Routes a task may be generated on, and the choice of one before a paid attempt: pure and
deterministic, every fact passed in (docs/architecture.md, "Routing")."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from contracts.admission import BreakerMode

MAX_FALLBACKS = 4  # routes after the primary; each costs a breaker read before every paid attempt


class Route(BaseModel):
    """One provider and model a task may be generated on."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    provider: str = Field(min_length=1, max_length=64)
    model: str = Field(min_length=1, max_length=100)

    def __str__(self) -> str:
        return f"{self.provider}/{self.model}"


class SkipReason(StrEnum):
    LOCKED = "locked"  # lock_model: only the primary route is acceptable
    UNHEALTHY = "unhealthy"  # its provider's breaker is open, or half-open with its probe out
    UNSUPPORTED = "unsupported"  # it cannot make this video (model, ratio, duration, configuration)
    UNAFFORDABLE = "unaffordable"  # dearer than the reservation and the tenant cannot pay the difference


class RouteFacts(BaseModel):
    """What is known of one route as the attempt is about to be made."""

    route: Route
    breaker: BreakerMode = BreakerMode.CLOSED
    probe_free: bool = True  # half-open: no probe of its provider is out, so one submit may go
    problem: str | None = None  # why it cannot make this video (activities.tasks.route_problem), or None
    price: float = Field(ge=0)  # credits this video costs on the route


class RouteSkip(BaseModel):
    route: Route
    reason: SkipReason
    detail: str


class RouteChoice(BaseModel):
    """The route of the next attempt, the credit to reserve beyond what is held, and why each route
    before it (or, under lock_model, after it) was not taken."""

    route: Route
    extra_reserve: float = 0.0
    skipped: list[RouteSkip] = []
    waits: bool = False  # no route is usable now: the attempt waits on the primary's gate
    pinned: bool = False  # kept because a job of the task may exist on it

    def note(self) -> str:
        """One line for the attempt's record, `show` and the overview."""
        why = "; ".join(f"{s.route} skipped ({s.reason.value}: {s.detail})" for s in self.skipped)
        head = f"{self.route}" + (" (kept: a job of this task may exist there)" if self.pinned else "")
        head += " (waits: no route usable now)" if self.waits else ""
        return f"{head}; {why}" if why else head


def _skip(facts: RouteFacts, reserved: float, spendable: float) -> RouteSkip | None:
    """Why this route cannot take the attempt now, checked in order: health, capability, price."""
    if facts.breaker is BreakerMode.OPEN or (facts.breaker is BreakerMode.HALF_OPEN and not facts.probe_free):
        detail = "breaker open" if facts.breaker is BreakerMode.OPEN else "breaker half-open, its probe out"
        return RouteSkip(route=facts.route, reason=SkipReason.UNHEALTHY, detail=detail)
    if facts.problem:
        return RouteSkip(route=facts.route, reason=SkipReason.UNSUPPORTED, detail=facts.problem)
    extra = facts.price - reserved
    if extra > 0 and extra > spendable:
        return RouteSkip(route=facts.route, reason=SkipReason.UNAFFORDABLE,
                         detail=f"costs {facts.price:g}, {extra:g} more than reserved; {spendable:g} spendable")
    return None


def choose_route(candidates: list[RouteFacts], *, reserved: float, spendable: float, lock_model: bool = False,
                 current: Route | None = None, job_may_exist: bool = False) -> RouteChoice:
    """The first usable route of `candidates` (the primary first, then the fallbacks in order).

    `current` is the route the task holds (its row's). A task whose last submit's outcome is unknown, or
    whose job may still run, keeps it: a second route would risk a second paid job. Under `lock_model`
    only the primary is considered. When no route is usable the attempt waits on `current` (the primary
    when not given): its gate holds it until the breaker lets a submit through, and the task's row, its
    reservation and the gate it waits at keep naming one route."""
    if not candidates:
        raise ValueError("no route to choose from")
    primary = candidates[0].route
    if job_may_exist and current is not None:
        return RouteChoice(route=current, pinned=True)
    considered = candidates[:1] if lock_model else candidates
    skipped = [RouteSkip(route=c.route, reason=SkipReason.LOCKED, detail="lock_model = true")
               for c in candidates[1:]] if lock_model else []
    passed: list[RouteSkip] = []
    for facts in considered:
        why = _skip(facts, reserved, spendable)
        if why is None:
            return RouteChoice(route=facts.route, extra_reserve=max(0.0, facts.price - reserved),
                               skipped=passed + skipped)
        passed.append(why)
    return RouteChoice(route=current or primary, skipped=passed + skipped, waits=True)
