"""Failpoints for crash drills: `REELQUEUE_FAILPOINTS="before_submit=crash,mid_poll=error"`.

Read once per process from the environment (the worker's); free when unset. `crash` SIGKILLs the
process on the spot (no cleanup, like a power cut), `hang` blocks the activity until its timeout,
`error` raises as an infrastructure failure would, `slow` makes the step slow where the step
supports it (`slow_transcode`: ffmpeg reads its input far below real time, honestly slow).
`reelqueue drill` arms one point in a worker, lets it die, starts a clean worker and checks what
recovery found.
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
    "after_transcode_before_db",  # the proxy written, no proxy row
    "before_settle",  # renditions recorded, credit not settled
)
# Points for tests of degraded steps, not crash drills (`reelqueue drill` crashes at POINTS only).
TEST_POINTS: tuple[str, ...] = (
    "slow_transcode",  # the proxy's ffmpeg (slow: reads its input so that the proxy takes SLOW_TRANSCODE_S)
    "make_hls",  # the HLS rendition of a stored proxy (error: HLS fails, the proxy stays)
)
ACTIONS = ("crash", "hang", "error", "slow")
SLOW_TRANSCODE_S = 65.0  # past the 60 s heartbeat timeout the transcode step once had


class FailpointError(RuntimeError):
    """Raised by an `error` failpoint; retried like any infrastructure failure."""


def parse(spec: str) -> dict[str, str]:
    """`"a=crash,b=error"` -> {"a": "crash", "b": "error"}; unknown names or actions are refused."""
    armed: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, action = item.partition("=")
        if name not in POINTS + TEST_POINTS or action not in ACTIONS:
            raise ValueError(f"bad failpoint {item!r}: points {', '.join(POINTS + TEST_POINTS)}; "
                             f"actions {', '.join(ACTIONS)}")
        armed[name] = action
    return armed


@lru_cache(maxsize=1)
def _armed() -> dict[str, str]:
    return parse(os.environ.get(ENV, ""))


def armed(name: str) -> str | None:
    """The action armed at `name`, if any (for steps that act on `slow` themselves)."""
    return _armed().get(name) if os.environ.get(ENV) else None


def failpoint(name: str) -> None:
    """Do what the environment armed at `name`, or nothing (`slow` is the step's own business)."""
    action = armed(name)
    if action == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)  # the signal is asynchronous; never run on past the point
    elif action == "hang":
        while True:  # short sleeps: a cancellation (a worker's shutdown) raised in this thread lands
            time.sleep(1)
    elif action == "error":
        raise FailpointError(f"failpoint {name}")
