"""`/_sim`: the test hooks: every job as the tests see it, the counters, and the faults to inject."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from adapters.providers.emulator_api import SubmitIn
from emulator.clock import JobClock
from emulator.faults import FaultBoard, UnknownDialect
from emulator.service import JobService
from emulator.stats import StatsBoard
from emulator.store import JobStore
from emulator.wire import Faults, SimJobChange, SimJobList, SimJobOut, SimStats


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

    @sim.post("/jobs/{job_id}")
    def sim_change(job_id: str, body: SimJobChange) -> SimJobOut:
        """Change one job after the fact (SimJobChange): 404 for an unknown job, 409 when it is not
        in the state the change needs (a cost for a succeeded job, finish_now for a running one)."""
        if store.get(job_id) is None:
            raise HTTPException(404, f"no job {job_id}")
        changed = service.change(job_id, cost=body.cost, finish_now=body.finish_now)
        if changed is None:
            raise HTTPException(409, f"job {job_id} is not in a state this change applies to")
        clock.wake()
        return service.sim_view(changed)

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
