"""`/_sim`: the test hooks: every job as the tests see it, the counters, and the faults to inject."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from adapters.providers.emulator_api import SubmitIn
from emulator.clock import JobClock
from emulator.faults import FaultBoard, UnknownDialect
from emulator.service import JobService
from emulator.stats import StatsBoard
from emulator.store import JobStore
from emulator.wire import Faults, SimJobList, SimJobOut, SimStats


def sim_router(service: JobService, store: JobStore, stats: StatsBoard, faults: FaultBoard,
               clock: JobClock) -> APIRouter:
    sim = APIRouter(prefix="/_sim")

    @sim.get("/jobs")
    def sim_jobs() -> SimJobList:
        return SimJobList(jobs=[service.sim_view(j) for j in store.list()])

    @sim.post("/jobs", status_code=201)
    def sim_create(body: SubmitIn) -> SimJobOut:
        """A job made behind the API's back (no fault, no counter): what a lost submit, another
        client on the same account or a provider-side replay leaves, for the provider backstop."""
        job = service.create(body, fail_injected=False)
        clock.wake()
        return service.sim_view(job)

    @sim.get("/stats")
    def sim_stats() -> SimStats:
        return stats.snapshot()

    @sim.delete("/stats")
    def reset_stats() -> SimStats:
        return stats.reset()

    @sim.get("/faults")
    def get_faults(dialect: str | None = None) -> Faults:
        """The faults set for all dialects, or (`?dialect=`) those set for one."""
        try:
            return faults.snapshot(dialect)
        except UnknownDialect as exc:
            raise HTTPException(422, str(exc)) from None

    @sim.post("/faults")
    def set_faults(body: Faults) -> Faults:
        try:
            updated = faults.update(body)
        except UnknownDialect as exc:
            raise HTTPException(422, str(exc)) from None
        clock.wake()  # a raised max_running starts throttled jobs now; held jobs end once released
        return updated

    @sim.delete("/faults")
    def reset_faults() -> Faults:
        reset = faults.reset()
        clock.wake()
        return reset

    return sim
