"""Heartbeats that a short step never sends: each heartbeat that reaches Temporal is a billable action
on Temporal Cloud and a server write, and the SDK sends a step's first heartbeat at once. A step that
ends within QUIET_S sends none; a longer one beats from then on (the SDK throttles the rest), well
inside every heartbeat timeout of the step table (30 s or more)."""

from __future__ import annotations

import time
from typing import Any

from temporalio import activity

QUIET_S = 5.0


class QuietHeartbeat:
    """`activity.heartbeat`, once the step has run QUIET_S (made at the step's start)."""

    def __init__(self, quiet_s: float = QUIET_S):
        self.since = time.monotonic()
        self.quiet_s = quiet_s

    def __call__(self, *details: Any) -> None:
        if time.monotonic() - self.since >= self.quiet_s:
            activity.heartbeat(*details)
