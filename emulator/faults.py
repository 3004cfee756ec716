"""Injected faults, counted down as submits and jobs consume them or drawn at the rates set, and
runtime tuning of the job limits (in memory, per process): one emulator serves a whole test
session, so each test sets what it needs here instead of restarting it.

Faults are set for every API at once, or for one dialect (`Faults.dialect`: a provider dialect's
prefix, or `emulator` for the emulator's own /v1 API), so one emulated provider can be down while
another answers. A call of a dialect takes its dialect's faults first, then those set for all;
tuning is for the whole emulator (its jobs share one clock)."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields

from emulator.config import EmulatorConfig
from emulator.wire import FaultRates, Faults

OWN_API = "emulator"  # the dialect name of the emulator's own /v1 API
OUTAGES = ("submit_outage_s", "cancel_outage_s", "status_outage_s", "list_outage_s", "status_missing_s",
           "cancel_missing_s")
# Counter -> the rate (FaultRates field) drawn when that counter has nothing pending.
RATED = {"submit_hang_after_create": "submit_unknown", "expire_output_urls": "expire_output_url",
         "duplicate_webhook": "duplicate_webhook", "reorder_webhooks": "reorder_webhook",
         "drop_webhook": "drop_webhook"}
SERVER_ERRORS = (500, 502, 503)  # what an injected 5xx answers, drawn evenly
# Defective clips a job can be given (fault `{defect}_video`): the job succeeds, the video is bad.
DEFECTS = ("black", "frozen")


class UnknownDialect(ValueError):
    """Faults set for a dialect this emulator does not speak."""


@dataclass(frozen=True)
class Tuning:
    """The job limits in force: the board's overrides, else the configured values."""

    job_seconds: float
    job_jitter: float
    max_running: int
    max_queued: int


TUNING = tuple(f.name for f in fields(Tuning))
WHOLE_EMULATOR = (*TUNING, "hold_running")  # what the job clock reads: never set for one dialect


@dataclass
class _Scope:
    """The faults set for one dialect (or for all): counters, outage ends, the RNG of the rates."""

    faults: Faults = field(default_factory=Faults)
    outage_until: dict[str, float] = field(default_factory=dict)
    rng: random.Random = field(default_factory=random.Random)

    def view(self, dialect: str | None) -> Faults:
        now = time.monotonic()
        left = {name: round(max(0.0, until - now), 3) for name, until in self.outage_until.items()}
        return self.faults.model_copy(update={**left, "dialect": dialect})


class FaultBoard:
    def __init__(self, dialects: Iterable[str] = ()) -> None:
        """`dialects`: the names faults may be scoped to, besides the emulator's own API."""
        self._lock = threading.Lock()
        self._names = frozenset({OWN_API, *dialects})
        self._all = _Scope()
        self._scoped: dict[str, _Scope] = {}

    def snapshot(self, dialect: str | None = None) -> Faults:
        """The faults set for all dialects, or those set for `dialect` alone."""
        with self._lock:
            scope = self._all if dialect is None else self._scoped.get(self._known(dialect), _Scope())
            return scope.view(dialect)

    def update(self, given: Faults) -> Faults:
        """Set the counters the caller sent, for its dialect or for all; the others keep their
        pending values. An outage given in seconds starts now."""
        sent = given.model_dump(include=given.model_fields_set - {"dialect"})
        dialect = given.dialect
        with self._lock:
            if dialect is None:
                scope = self._all
            else:
                tuned = sorted(set(sent) & set(WHOLE_EMULATOR))
                if tuned:
                    raise UnknownDialect(f"{', '.join(tuned)}: tuning is for the whole emulator, not one dialect")
                scope = self._scoped.setdefault(self._known(dialect), _Scope())
            for name in OUTAGES:
                if name in sent:
                    scope.outage_until[name] = time.monotonic() + sent.pop(name)
            if sent.pop("rates", None) is not None:
                sent["rates"] = given.rates
                scope.rng = random.Random(given.rates.seed)
            scope.faults = scope.faults.model_copy(update=sent)
            return scope.view(dialect)

    def reset(self) -> Faults:
        """Every fault of every dialect, and the tuning, back to none."""
        with self._lock:
            self._all = _Scope()
            self._scoped.clear()
            return self._all.view(None)

    def tuning(self, config: EmulatorConfig) -> Tuning:
        faults = self.snapshot()
        values = {}
        for name in TUNING:
            override = getattr(faults, name)
            values[name] = getattr(config, name) if override is None else override
        return Tuning(**values)

    def in_outage(self, name: str, dialect: str | None = None) -> bool:
        with self._lock:
            return any(time.monotonic() < scope.outage_until.get(name, 0.0) for scope in self._chain(dialect))

    def flag(self, name: str, dialect: str | None = None) -> bool:
        """A boolean fault that holds while set (drop_all_webhooks, hold_running)."""
        with self._lock:
            return any(bool(getattr(scope.faults, name)) for scope in self._chain(dialect))

    def take(self, counter: str, dialect: str | None = None) -> bool:
        """Consume one unit of `counter` (the dialect's first), else draw its rate (RATED); True if the
        fault applies."""
        with self._lock:
            chain = list(self._chain(dialect))
            for scope in chain:
                left = getattr(scope.faults, counter)
                if left > 0:
                    setattr(scope.faults, counter, left - 1)
                    return True
            rate = RATED.get(counter)
            return rate is not None and any(_draw(scope, getattr(scope.faults.rates, rate)) for scope in chain)

    def take_submit_status(self, dialect: str | None = None) -> int | None:
        """The injected HTTP status for this submit: a pending one, else one drawn at the rates."""
        with self._lock:
            chain = list(self._chain(dialect))
            for scope in chain:
                if scope.faults.submit_status is not None and scope.faults.submit_status_count > 0:
                    scope.faults.submit_status_count -= 1
                    return scope.faults.submit_status
            for scope in chain:
                rates: FaultRates = scope.faults.rates
                if not rates.submit_429 and not rates.submit_5xx:
                    continue
                roll = scope.rng.random()
                if roll < rates.submit_429:
                    return 429
                if roll < rates.submit_429 + rates.submit_5xx:
                    return scope.rng.choice(SERVER_ERRORS)
            return None

    def _known(self, dialect: str) -> str:
        if dialect not in self._names:
            raise UnknownDialect(f"dialect {dialect!r}: not one of {', '.join(sorted(self._names))}")
        return dialect

    def _chain(self, dialect: str | None) -> Iterator[_Scope]:
        """The scopes a call of `dialect` takes faults from, in order (under the lock)."""
        if dialect is not None and dialect in self._scoped:
            yield self._scoped[dialect]
        yield self._all


def _draw(scope: _Scope, chance: float) -> bool:
    """One draw from the scope's seeded RNG (under the lock); a zero chance draws nothing."""
    return chance > 0 and scope.rng.random() < chance
