"""The job engine every wire format shares: submit with the injected faults, read, list, cancel.

The emulator's own /v1 API and each provider dialect (emulator/dialects/) call these and render
the answers and refusals in their own shapes, so `/_sim/faults`, the job clock, renders, output
signing and webhooks behave the same whichever wire format a client speaks. A dialect's jobs
carry `"{dialect}:{id}"` as request key, which keeps each dialect's listings to its own jobs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from fastapi import Request

from adapters.providers.emulator_api import JobOut, SubmitIn
from emulator.clock import JobClock
from emulator.config import EmulatorConfig
from emulator.faults import DEFECTS, OWN_API, FaultBoard
from emulator.service import JobService
from emulator.stats import StatsBoard
from emulator.store import JobRecord, JobStore
from emulator.wire import ALIVE, WAITING

RETRY_AFTER_S = 1.0  # the hint sent with an injected 429/5xx, a full queue and an outage


class EngineRefusal(Exception):
    """A call the engine refused; `kind` says why in words a dialect maps to its own codes:
    injected, queue_full, outage, not_found."""

    def __init__(self, status: int, kind: str, message: str, *, retry_after_s: float | None = None):
        super().__init__(message)
        self.status, self.kind, self.message, self.retry_after_s = status, kind, message, retry_after_s


@dataclass
class Engine:
    config: EmulatorConfig
    store: JobStore
    service: JobService
    faults: FaultBoard
    clock: JobClock
    stats: StatsBoard

    def _count_refusal(self, status: int) -> None:
        if status == 429:
            self.stats.add("refused_429")

    async def submit(self, body: SubmitIn, request: Request, dialect: str = OWN_API) -> JobRecord:
        """Create a job, or refuse as the pending faults (of `dialect` and of all) and the queue limit say."""
        self.stats.add("submits")
        self.outage("submit_outage_s", dialect)
        self._injected_status(dialect)
        if self.store.count(*WAITING) >= self.faults.tuning(self.config).max_queued:
            self._count_refusal(429)
            raise EngineRefusal(429, "queue_full", "too many jobs waiting", retry_after_s=RETRY_AFTER_S)
        fail = self.faults.take("fail_next", dialect)
        defect = next((kind for kind in DEFECTS if self.faults.take(f"{kind}_video", dialect)), None)
        if body.webhook_url and self.faults.take("webhook_before_response", dialect):  # first event before the answer
            job = await asyncio.to_thread(self.service.create, body, fail_injected=fail, announce_now=True,
                                          defect=defect)
        else:
            job = self.service.create(body, fail_injected=fail, defect=defect)
        self.stats.add("jobs_created")
        self.stats.peak("max_alive", self.store.count(*ALIVE))
        self.clock.wake()
        if self.faults.take("submit_hang_after_create", dialect):
            self.stats.add("submits_hung")
            await _hold_answer(request, self.config.hang_s)
        return job

    async def answer_now(self, request: Request, dialect: str) -> None:
        """A call answered at once, with no job (a moderation check): the submit faults apply to it,
        the outage, an injected status and a held answer (`submit_hang_after_create`, a timeout)."""
        self.stats.add("sync_calls")
        self.outage("submit_outage_s", dialect)
        self._injected_status(dialect)
        if self.faults.take("submit_hang_after_create", dialect):
            self.stats.add("submits_hung")
            await _hold_answer(request, self.config.hang_s)

    def _injected_status(self, dialect: str) -> None:
        """Refuse with the status the faults inject for this call, if any."""
        injected = self.faults.take_submit_status(dialect)
        if injected is not None:
            retry = RETRY_AFTER_S if injected == 429 or injected >= 500 else None
            self._count_refusal(injected)
            if injected == 429 or injected >= 500:
                self.stats.add("injected_429" if injected == 429 else "injected_5xx")
            raise EngineRefusal(injected, "injected", f"injected HTTP {injected}", retry_after_s=retry)

    def outage(self, name: str, dialect: str = OWN_API) -> None:
        if self.faults.in_outage(name, dialect):
            self.stats.add("outage_refusals")
            raise EngineRefusal(503, "outage", "service temporarily unavailable", retry_after_s=RETRY_AFTER_S)

    def status(self, job_id: str, dialect: str | None = None) -> JobOut:
        """A job status call (counted, with the status faults; a succeeded job's output URL may be
        handed out dead, as `expire_output_urls` asks). `dialect`: None for the emulator's own API."""
        self.stats.add("status_calls")
        self.stats.per_second("status_calls_peak_per_s")
        scope = dialect or OWN_API
        self.outage("status_outage_s", scope)
        if self.faults.in_outage("status_missing_s", scope):
            raise EngineRefusal(404, "not_found", f"no job {job_id}")
        job = self.job(job_id, dialect)
        dead = job.status == "succeeded" and self.faults.take("expire_output_urls", scope)
        if dead:
            self.stats.add("output_urls_expired")
        return self.service.view(job, dead_url=dead)

    def job(self, job_id: str, dialect: str | None = None) -> JobRecord:
        job = self.store.get(job_id)
        if job is None or (dialect is not None and not job.request_key.startswith(f"{dialect}:")):
            raise EngineRefusal(404, "not_found", f"no job {job_id}")
        return job

    def cancel(self, job_id: str, dialect: str | None = None) -> JobOut:
        scope = dialect or OWN_API
        self.outage("cancel_outage_s", scope)
        if self.faults.in_outage("cancel_missing_s", scope):
            raise EngineRefusal(404, "not_found", f"no job {job_id}")
        running_on = self.job(job_id, dialect)
        if running_on.status in ALIVE and self.faults.take("cancel_lost_race"):
            return self.service.view(running_on).model_copy(update={"status": "canceled"})
        job = self.service.cancel(job_id)
        self.clock.wake()  # a running slot may be free
        return self.service.view(job)

    def listing(self, dialect: str, request_key_prefix: str) -> list[JobOut]:
        """`dialect`'s jobs whose request key starts with the prefix, oldest first (with the list outage)."""
        self.outage("list_outage_s", dialect)
        return [self.service.view(j) for j in self.store.list_prefix(request_key_prefix)]

    def on_webhook(self, dialect: str, render: Callable[[JobOut], bytes]) -> None:
        """Webhooks of this dialect's jobs carry `render(job)` as body."""
        self.service.webhook_bodies[dialect] = render


async def _hold_answer(request: Request, seconds: float) -> None:
    """The submit_hang fault: the job exists, the answer never comes in time. Stops early once
    the client has hung up, so a stopped test server is not kept waiting."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not await request.is_disconnected():
        await asyncio.sleep(0.1)
