"""Routing: the route of each paid attempt, for a task whose template names fallback routes
(route-fallback-v1). Chosen before the attempt asks for its provider's slot, and again while it waits in
that provider's line; never changed while a job of the task may exist (docs/architecture.md, "Routing")."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.routing import RoutingActivities
    from contracts.messages import RouteRequest
    from contracts.routing import Route, RouteChoice, SkipReason

from workflows.generation.patches import ROUTE_FALLBACK, ROUTE_LOOK
from workflows.generation.state import RunState
from workflows.generation.steps import REASK_EVERY, REROUTE_EVERY


class Routing(RunState):
    """`_route` before each paid attempt; `Admission` swaps the model's slot when the route changes."""

    def _routable(self) -> bool:
        """The task may change route: its template names fallbacks (runs from before the patch never do)."""
        return len(self._info.routes) > 1 and self._patched(ROUTE_FALLBACK)

    def _job_may_exist(self) -> bool:
        """A job of the task may exist on its route (an unknown submit not reconciled, an accepted duplicate
        risk): it keeps that route, for the next attempt and while it waits in a line (the step checks the
        task's attempts and strays too)."""
        return self._route_pinned or self._unknown is not None

    async def _route(self) -> bool:
        """Choose the next attempt's route (the activity takes it in the task's row and ledger); True when
        it changed. A task whose job may still exist keeps its route (an unknown submit is reconciled
        before this is asked; an accepted duplicate risk pins the route for the rest of the run)."""
        current = Route(provider=self._info.provider, model=self._info.model)
        taken = await self._run(RoutingActivities.choose_route, RouteRequest(
            task_id=self._task_id, run=self._run_no, attempt_no=self._attempt_no + 1, current=current,
            job_may_exist=self._job_may_exist()))
        self._route_note = taken.choice.note()
        if taken.choice.route == current:
            return False
        old_model_layer = self._model_layer()
        self._info = self._info.model_copy(update=taken.fields.model_dump())
        self._asked_at = None  # a new provider's line: its place counts from its first ask there
        await self._swap_model_slot(old_model_layer)
        self._tell("routing", f"attempt {self._attempt_no + 1} goes to {taken.choice.route}: {self._route_note}")
        return True

    async def _route_elsewhere(self) -> bool:
        """While the task waits in its provider's line: whether another route would be chosen now (nothing
        is taken). If so, and no grant came meanwhile, `_rerouted` is set: the task leaves the line and
        its next attempt chooses again (`_route`). With route-look-v1 the look is a local activity and
        sets when the next comes (`_look_every`)."""
        current = Route(provider=self._info.provider, model=self._info.model)
        look = RouteRequest(task_id=self._task_id, run=self._run_no, attempt_no=self._attempt_no + 1,
                            current=current, job_may_exist=self._job_may_exist(), take=False)
        if self._cheap_looks():
            taken = await self._run_local(RoutingActivities.choose_route, look)
            self._look_every = next_look(self._look_every, taken.choice, current)
        else:
            taken = await self._run(RoutingActivities.choose_route, look)
        self._rerouted = taken.choice.route != current and self._granted is None
        return self._rerouted

    def _cheap_looks(self) -> bool:
        """route-look-v1, asked once by a task with fallback routes when it first waits in a line."""
        if self._look_every is None and self._patched(ROUTE_LOOK):
            self._look_every = REROUTE_EVERY
        return self._look_every is not None


def next_look(every: timedelta, choice: RouteChoice, current: Route) -> timedelta:
    """The spacing of a waiting task's next look at its routes: REROUTE_EVERY while a route before its own,
    or its own, is unhealthy (one may heal, or its own gate holds it back), else twice the last, up to
    REASK_EVERY: a task waiting its turn at a healthy provider looks about six times an hour."""
    unhealthy = any(s.reason is SkipReason.UNHEALTHY for s in choice.skipped)
    if unhealthy or choice.waits or choice.route != current:
        return REROUTE_EVERY
    return min(every * 2, REASK_EVERY)
