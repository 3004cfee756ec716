"""The job clock: one thread moves jobs by time, so job time costs no render thread.

Each tick it starts waiting jobs (oldest first) while fewer than `max_running` run, marks the
queued ones left over `throttled`, and finishes running jobs whose job time has passed and
whose render is done. Jobs a dead process left running are started again. All state is in the
store, so a restart resumes where the last process stopped.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable

from emulator.config import EmulatorConfig
from emulator.faults import FaultBoard, Tuning
from emulator.service import JobService
from emulator.stats import StatsBoard
from emulator.timing import draw_job_seconds
from emulator.wire import ALIVE, WAITING

log = logging.getLogger("emulator.clock")
_TICK_S = 0.05  # while jobs are alive: how late a job may finish or start
_IDLE_S = 0.5


class JobClock:
    def __init__(
        self,
        service: JobService,
        config: EmulatorConfig,
        faults: FaultBoard,
        stats: StatsBoard,
        on_started: Callable[[], None] = lambda: None,
    ):
        self._service = service
        self._store = service.store
        self._config = config
        self._faults = faults
        self._stats = stats
        self._on_started = on_started  # jobs are waiting for a render
        self._rng = random.Random()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="emulator-clock", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def wake(self) -> None:
        """Something changed (a submit, a cancel, a finished render): tick now."""
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()  # before the tick: a wake during it makes the next one immediate
            try:
                busy = self.tick(time.time())
            except Exception:  # a bug in one tick must not stop time
                log.exception("job clock tick failed")
                busy = True
            self._wake.wait(_TICK_S if busy else _IDLE_S)

    def tick(self, now: float) -> bool:
        """One pass over the jobs; True while any job is alive."""
        tuning = self._faults.tuning(self._config)
        restarted = self._restart_orphans(tuning)
        if not self._faults.flag("hold_running"):
            for job in self._store.due(now):
                self._service.finish(job)
        started = self._start_waiting(tuning)
        if restarted or started:
            self._stats.peak("max_running", self._store.count("running"))
            self._on_started()
        return self._store.count(*ALIVE) > 0

    def _draw(self, tuning: Tuning) -> float:
        return draw_job_seconds(tuning.job_seconds, tuning.job_jitter, self._rng)

    def _restart_orphans(self, tuning: Tuning) -> int:
        """Jobs a dead process left running run again here (new timer, new render)."""
        return sum(self._service.start(job, self._draw(tuning)) is not None for job in self._store.orphans())

    def _start_waiting(self, tuning: Tuning) -> int:
        """Start the oldest waiting jobs into the free running slots; throttle the queued rest."""
        free = tuning.max_running - self._store.count("running")
        started = 0
        if free > 0:
            for job in self._store.oldest(WAITING, free):
                started += self._service.start(job, self._draw(tuning)) is not None
        if started >= free:
            # No slot left: whatever is still queued cannot run now. (With slots left, a queued
            # job was created during this tick; the next one starts it.)
            for job in self._store.oldest(("queued",)):
                self._service.throttle(job)
        return started
