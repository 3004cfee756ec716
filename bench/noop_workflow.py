"""The engine's ceiling for `bench/pipeline.py`: a workflow of 8 no-op activities in a row.

Shaped like GenerationWorkflow's happy path (one activity after the other, each through Temporal's
history), doing no work, so its rate is what the engine and the worker settings allow.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow

STEPS = 8


@activity.defn(name="bench_noop")
def noop(step: int) -> int:
    """Sync like the pipeline's activities: it runs on the worker's thread pool."""
    return step


@workflow.defn(name="BenchNoopWorkflow")
class NoopWorkflow:
    @workflow.run
    async def run(self, steps: int) -> int:
        done = 0
        for step in range(steps):
            done += 1 if await workflow.execute_activity(noop, step, start_to_close_timeout=timedelta(seconds=30)) \
                == step else 0
        return done
