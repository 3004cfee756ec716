"""Job time, the emulator's stand-in for generation time: a timer per job, not a held thread.

Pure functions, so the clock and the job view agree on them and tests can pin them down.
"""

from __future__ import annotations

import random

# Progress of a running job stops here until it has finished: 1.0 means succeeded.
PROGRESS_CAP = 0.95


def draw_job_seconds(base_s: float, jitter: float, rng: random.Random) -> float:
    """`base_s` scaled by a factor drawn uniformly from [1 - jitter, 1 + jitter] (drawn once per
    job, when it starts running), so jobs started together do not all finish together."""
    if jitter <= 0:
        return base_s
    return base_s * rng.uniform(1.0 - jitter, 1.0 + jitter)


def running_progress(started_at: float, job_s: float, now: float) -> float:
    """Share of the job time passed, scaled to [0, PROGRESS_CAP]."""
    if job_s <= 0:
        return PROGRESS_CAP
    return PROGRESS_CAP * min(1.0, max(0.0, (now - started_at) / job_s))
