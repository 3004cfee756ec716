"""What the emulator saw (GET /_sim/stats): counters and peaks, bumped by the API, the clock,
the render threads and the webhook thread, so one lock-guarded board serves them all."""

from __future__ import annotations

import threading

from emulator.wire import SimStats


class StatsBoard:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stats = SimStats()

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self._stats, name, getattr(self._stats, name) + n)

    def peak(self, name: str, value: int) -> None:
        """Keep the highest value seen for `name` (max_alive, max_running)."""
        with self._lock:
            setattr(self._stats, name, max(getattr(self._stats, name), value))

    def snapshot(self) -> SimStats:
        with self._lock:
            stats = self._stats.model_copy()
        if stats.jobs_created:
            stats.status_calls_per_job = round(stats.status_calls / stats.jobs_created, 3)
        return stats

    def reset(self) -> SimStats:
        with self._lock:
            self._stats = SimStats()
        return self.snapshot()
