"""A step cut off by its worker's shutdown fails retryably (another worker takes it up); a step
cancelled by its workflow stays cancelled."""

from __future__ import annotations

import threading
import time

import pytest
from temporalio import activity
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.testing import ActivityEnvironment

from activities.errors import WORKER_SHUTDOWN, classified


@classified
def busy() -> None:
    while True:
        activity.heartbeat()
        time.sleep(0.01)


def _cut_off(env: ActivityEnvironment, *, shutdown: bool) -> BaseException:
    def stop() -> None:
        if shutdown:
            env.worker_shutdown()
        env.cancel()

    threading.Timer(0.1, stop).start()
    with pytest.raises((ApplicationError, CancelledError)) as ended:
        env.run(busy)
    return ended.value


def test_a_worker_shutdown_becomes_a_retryable_failure() -> None:
    error = _cut_off(ActivityEnvironment(), shutdown=True)
    assert isinstance(error, ApplicationError) and error.type == WORKER_SHUTDOWN and not error.non_retryable


def test_a_cancel_from_the_workflow_stays_a_cancel() -> None:
    assert isinstance(_cut_off(ActivityEnvironment(), shutdown=False), CancelledError)
