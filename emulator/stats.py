"""What the emulator saw (GET /_sim/stats): counters and peaks, bumped by the API, the clock,
the render threads and the webhook thread, so one lock-guarded board serves them all."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from emulator.wire import SimStats


class StatsBoard:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        """`clock`: wall-clock seconds, whose whole seconds the per-second peaks are counted in."""
        self._lock = threading.Lock()
        self._stats = SimStats()
        self._clock = clock
        self._seconds: dict[str, tuple[int, int]] = {}  # peak name -> (the whole second now counted, count)

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self._stats, name, getattr(self._stats, name) + n)

    def peak(self, name: str, value: int) -> None:
        """Keep the highest value seen for `name` (max_alive, max_running)."""
        with self._lock:
            setattr(self._stats, name, max(getattr(self._stats, name), value))

    def per_second(self, name: str) -> None:
        """One more event in the current whole second of the clock (from xx:xx:05.000 up to, not
        including, xx:xx:06.000); `name` keeps the most any whole second has seen."""
        with self._lock:
            second = int(self._clock())
            counted, count = self._seconds.get(name, (second, 0))
            count = count + 1 if counted == second else 1
            self._seconds[name] = (second, count)
            setattr(self._stats, name, max(getattr(self._stats, name), count))

    def snapshot(self) -> SimStats:
        with self._lock:
            stats = self._stats.model_copy()
        if stats.jobs_created:
            stats.status_calls_per_job = round(stats.status_calls / stats.jobs_created, 3)
        return stats

    def reset(self) -> SimStats:
        with self._lock:
            self._stats = SimStats()
            self._seconds.clear()
        return self.snapshot()
