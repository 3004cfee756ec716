"""Failpoints for crash drills: `REELQUEUE_FAILPOINTS="before_submit=crash,mid_poll=error"`.

Read once per process from the environment (the worker's); free when unset. `crash` SIGKILLs the
process on the spot (no cleanup, like a power cut), `hang` blocks the activity until its timeout,
`error` raises as an infrastructure failure would. `reelqueue drill` arms one point in a worker,
lets it die, starts a clean worker and checks what recovery found.
"""

from __future__ import annotations

import os
import signal
import time
from functools import lru_cache

ENV = "REELQUEUE_FAILPOINTS"
POINTS: tuple[str, ...] = (
    "before_submit",  # attempt row SENDING, nothing sent
    "after_accept_before_record",  # the provider created the job, we hold no job id
    "mid_poll",  # job id stored, a status call in flight
    "mid_download",  # part of the output copied to a staging object
    "after_store_before_db",  # raw output promoted in storage, no asset row
    "after_transcode_before_db",  # renditions written, no asset rows
    "before_settle",  # renditions recorded, credit not settled
)
ACTIONS = ("crash", "hang", "error")


class FailpointError(RuntimeError):
    """Raised by an `error` failpoint; retried like any infrastructure failure."""


def parse(spec: str) -> dict[str, str]:
    """`"a=crash,b=error"` -> {"a": "crash", "b": "error"}; unknown names or actions are refused."""
    armed: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, action = item.partition("=")
        if name not in POINTS or action not in ACTIONS:
            raise ValueError(f"bad failpoint {item!r}: points {', '.join(POINTS)}; actions {', '.join(ACTIONS)}")
        armed[name] = action
    return armed


@lru_cache(maxsize=1)
def _armed() -> dict[str, str]:
    return parse(os.environ.get(ENV, ""))


def failpoint(name: str) -> None:
    """Do what the environment armed at `name`, or nothing."""
    action = _armed().get(name) if os.environ.get(ENV) else None
    if action == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)  # the signal is asynchronous; never run on past the point
    elif action == "hang":
        while True:
            time.sleep(3600)
    elif action == "error":
        raise FailpointError(f"failpoint {name}")
