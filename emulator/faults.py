"""Injected faults, counted down as submits and jobs consume them or drawn at the rates set, and
runtime tuning of the job limits (in memory, per process): one emulator serves a whole test
session, so each test sets what it needs here instead of restarting it."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, fields

from emulator.config import EmulatorConfig
from emulator.wire import FaultRates, Faults

OUTAGES = ("submit_outage_s", "cancel_outage_s", "status_outage_s", "list_outage_s", "status_missing_s",
           "cancel_missing_s")
# Counter -> the rate (FaultRates field) drawn when that counter has nothing pending.
RATED = {"submit_hang_after_create": "submit_unknown", "expire_output_urls": "expire_output_url",
         "duplicate_webhook": "duplicate_webhook", "reorder_webhooks": "reorder_webhook",
         "drop_webhook": "drop_webhook"}
SERVER_ERRORS = (500, 502, 503)  # what an injected 5xx answers, drawn evenly
# Defective clips a job can be given (fault `{defect}_video`): the job succeeds, the video is bad.
DEFECTS = ("black", "frozen")


@dataclass(frozen=True)
class Tuning:
    """The job limits in force: the board's overrides, else the configured values."""

    job_seconds: float
    job_jitter: float
    max_running: int
    max_queued: int


class FaultBoard:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults = Faults()
        self._outage_until: dict[str, float] = {}
        self._rng = random.Random()

    def snapshot(self) -> Faults:
        with self._lock:
            return self._view()

    def update(self, given: Faults) -> Faults:
        """Set the counters the caller sent; the others keep their pending values. An outage
        given in seconds starts now."""
        with self._lock:
            sent = given.model_dump(include=given.model_fields_set)
            for name in OUTAGES:
                if name in sent:
                    self._outage_until[name] = time.monotonic() + sent.pop(name)
            if sent.pop("rates", None) is not None:
                sent["rates"] = given.rates
                self._rng = random.Random(given.rates.seed)
            self._faults = self._faults.model_copy(update=sent)
            return self._view()

    def reset(self) -> Faults:
        with self._lock:
            self._faults = Faults()
            self._outage_until.clear()
            return self._view()

    def tuning(self, config: EmulatorConfig) -> Tuning:
        faults = self.snapshot()
        values = {}
        for field in fields(Tuning):
            override = getattr(faults, field.name)
            values[field.name] = getattr(config, field.name) if override is None else override
        return Tuning(**values)

    def in_outage(self, name: str) -> bool:
        with self._lock:
            return time.monotonic() < self._outage_until.get(name, 0.0)

    def _view(self) -> Faults:
        now = time.monotonic()
        left = {name: round(max(0.0, until - now), 3) for name, until in self._outage_until.items()}
        return self._faults.model_copy(update=left)

    def flag(self, name: str) -> bool:
        """A boolean fault that holds while set (drop_all_webhooks)."""
        with self._lock:
            return bool(getattr(self._faults, name))

    def take(self, counter: str) -> bool:
        """Consume one unit of `counter`, else draw its rate (RATED); True if the fault applies."""
        with self._lock:
            left = getattr(self._faults, counter)
            if left <= 0:
                rate = RATED.get(counter)
                return rate is not None and self._draw(getattr(self._faults.rates, rate))
            setattr(self._faults, counter, left - 1)
            return True

    def take_submit_status(self) -> int | None:
        """The injected HTTP status for this submit: a pending one, else one drawn at the rates."""
        with self._lock:
            status = self._faults.submit_status
        if status is not None and self.take("submit_status_count"):
            return status
        with self._lock:
            rates: FaultRates = self._faults.rates
            if not rates.submit_429 and not rates.submit_5xx:
                return None
            roll = self._rng.random()
            if roll < rates.submit_429:
                return 429
            return self._rng.choice(SERVER_ERRORS) if roll < rates.submit_429 + rates.submit_5xx else None

    def _draw(self, chance: float) -> bool:
        """One draw from the seeded RNG (under the lock); a zero chance draws nothing."""
        return chance > 0 and self._rng.random() < chance
