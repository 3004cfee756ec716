"""Injected faults, counted down as submits and jobs consume them (in memory, per process)."""

from __future__ import annotations

import threading

from emulator.wire import Faults


class FaultBoard:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults = Faults()

    def snapshot(self) -> Faults:
        with self._lock:
            return self._faults.model_copy()

    def update(self, given: Faults) -> Faults:
        """Set the counters the caller sent; the others keep their pending values."""
        with self._lock:
            self._faults = self._faults.model_copy(update=given.model_dump(include=given.model_fields_set))
            return self._faults.model_copy()

    def reset(self) -> Faults:
        with self._lock:
            self._faults = Faults()
            return self._faults.model_copy()

    def take(self, counter: str) -> bool:
        """Consume one unit of `counter`; True if a fault was pending."""
        with self._lock:
            left = getattr(self._faults, counter)
            if left <= 0:
                return False
            setattr(self._faults, counter, left - 1)
            return True

    def take_submit_status(self) -> int | None:
        """The injected HTTP status for this submit, if one is pending."""
        with self._lock:
            status = self._faults.submit_status
        return status if status is not None and self.take("submit_status_count") else None
