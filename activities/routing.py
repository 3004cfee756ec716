"""The route of a task's next paid attempt: its template's routes, their providers' breakers (asked of
their gates), what each can make and costs, then `contracts.routing.choose_route`; a changed route is
taken in one transaction (the task's provider and model, and the RESERVE of the difference when it is
dearer) (docs/architecture.md, "Routing")."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal

from sqlalchemy import select
from sqlalchemy.orm import Session
from temporalio import activity
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from activities.errors import classified_async
from activities.ledger import available_credit, held_for_video, reserve_route_difference
from activities.tasks import route_fields, route_problem, task_routes
from adapters.providers.base import VideoProvider
from catalog.plan import Plan as PlanSpec
from config.defaults import AdmissionLayers
from contracts import workflow_api as api
from contracts.admission import BreakerMode, GateSnapshot
from contracts.messages import RouteRequest, RouteTaken
from contracts.routing import Route, RouteChoice, RouteFacts, choose_route
from schema.db import Database
from schema.models import Task
from schema.open_jobs import job_may_exist
from schema.task_store import TaskNotFound

GATE_QUERY_TIMEOUT_S = 5.0


class RoutingActivities:
    def __init__(self, db: Database, client: Client, providers: dict[str, VideoProvider],
                 plans: Callable[[Session, str], PlanSpec], layers: AdmissionLayers | None = None):
        """`plans`: a plan by id, validated once per process (TaskActivities.plan, shared with validation)."""
        self.db = db
        self.client = client
        self.providers = providers
        self.plans = plans
        self.layers = layers or AdmissionLayers()

    @activity.defn(name="choose_route")
    @classified_async
    async def choose_route(self, req: RouteRequest) -> RouteTaken:
        """Pick the route of attempt `req.attempt_no` and take it (`req.take` False: only say it). The gates
        are asked before the transaction; the choice is made inside it, with the tenant's credit locked,
        so a top-up is only held when the tenant can pay it."""
        plan, routes, lock_model, duration_s, ratio = await asyncio.to_thread(self._read, req)
        queue = activity.info().task_queue
        gates = {r.provider: await self._breaker(api.gate_id(r.provider, queue)) for r in routes}
        facts = [RouteFacts(route=r, breaker=gates[r.provider].breaker,
                            probe_free=not gates[r.provider].breaker_probe_out, price=0.0,
                            problem=route_problem(r.provider, self.providers.get(r.provider), r.model, duration_s,
                                                  ratio)) for r in routes]
        choice = await asyncio.to_thread(self._take, req, facts, lock_model, duration_s)
        fields = route_fields(plan, self.providers, self.layers, choice.route.provider, choice.route.model)
        return RouteTaken(choice=choice, fields=fields)

    def _read(self, req: RouteRequest) -> tuple[PlanSpec, list[Route], bool, float, str]:
        with self.db.transaction() as session:
            task = session.get(Task, req.task_id)
            if task is None:
                raise TaskNotFound(req.task_id)
            plan = self.plans(session, task.plan_id)
            routes, lock_model = task_routes(session, plan, task)
            return plan, routes, lock_model, float(task.duration_s), task.aspect_ratio

    async def _breaker(self, gate_id: str) -> GateSnapshot:
        """The gate's snapshot; a provider with no gate running has had no submit lately: closed."""
        try:
            return await self.client.get_workflow_handle(gate_id).query(
                api.QUERY_GATE_SNAPSHOT, result_type=GateSnapshot,
                rpc_timeout=timedelta(seconds=GATE_QUERY_TIMEOUT_S))
        except RPCError as exc:
            if exc.status is not RPCStatusCode.NOT_FOUND:
                raise
            return GateSnapshot(limit=0, effective=0, in_use=0, waiting=0, oldest_wait_s=0, granted=0, throttles=0,
                                breaker=BreakerMode.CLOSED)

    def _take(self, req: RouteRequest, facts: list[RouteFacts], lock_model: bool, duration_s: float) -> RouteChoice:
        """The choice, made from the task's row: the route it holds is the row's (whatever the run believes),
        and it is pinned there while a job of the task may exist (the run says so, or the attempts and strays
        do). A taken change moves the row and holds the difference in this one transaction; a look
        (`req.take` False) locks nothing."""
        with self.db.transaction() as session:
            query = select(Task).where(Task.id == req.task_id)
            task = session.scalar(query.with_for_update() if req.take else query)
            held = held_for_video(session, req.task_id, req.run)
            priced = [f.model_copy(update={"price": float(self._price(f.route, duration_s, held, i == 0))})
                      for i, f in enumerate(facts)]
            # The tenant's credit is read (and its row locked, when taking) only when a route costs more than the
            # task holds: a look at routes that cost no more sums no ledger.
            dearer = any(f.price > float(held) for f in priced)
            spendable = float(available_credit(session, task.tenant_id, lock=req.take)) if dearer else 0.0
            holds = Route(provider=task.provider, model=task.model)
            pinned = req.job_may_exist or job_may_exist(session, req.task_id)
            choice = choose_route(priced, reserved=float(held), spendable=spendable, lock_model=lock_model,
                                  current=holds, job_may_exist=pinned)
            if not req.take or choice.route == holds:
                return choice
            if choice.extra_reserve > 0:  # its price was checked against `spendable`, the tenant row locked
                reserve_route_difference(session, req.task_id, req.run, req.attempt_no,
                                         Decimal(str(choice.extra_reserve)),
                                         note=f"route {choice.route} costs more than the reservation")
            task.provider, task.model = choice.route.provider, choice.route.model
            return choice

    def _price(self, route: Route, duration_s: float, held: Decimal, primary: bool) -> Decimal:
        """A route's price for this video: the primary's is what the task holds for it; another's is its
        adapter's price table (a route without one, the emulator, is taken at what the task holds)."""
        prices = getattr(self.providers.get(route.provider), "prices", None)
        if primary or not prices or route.model not in prices:
            return held
        return Decimal(str(prices[route.model])) * Decimal(str(duration_s))
