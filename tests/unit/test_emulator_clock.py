"""The job clock over a real sqlite store, ticked by hand: no threads, HTTP or ffmpeg."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.providers.emulator_api import SubmitIn
from emulator.clock import JobClock
from emulator.config import EmulatorConfig
from emulator.faults import FaultBoard
from emulator.service import JobService
from emulator.stats import StatsBoard
from emulator.store import JobStore
from emulator.webhooks import WebhookSender
from emulator.wire import Faults


class Rig:
    """A store, service and clock on one data dir; `render` stands in for the render threads."""

    def __init__(self, data_dir: Path, **config: object):
        self.config = EmulatorConfig(data_dir=data_dir, **config)
        self.store = JobStore(self.config.db_path)
        self.service = JobService(self.config, self.store, WebhookSender("whsec_AAAA"))
        self.faults = FaultBoard()
        self.stats = StatsBoard()
        self.clock = JobClock(self.service, self.config, self.faults, self.stats)

    def submit(self, n: int = 1, **fields: object) -> list[str]:
        body = SubmitIn(request_key="k", model="m", aspect_ratio="9:16", duration_s=2, **fields)
        return [self.service.create(body, fail_injected=False).id for _ in range(n)]

    def render(self, error_code: str | None = None) -> list[str]:
        done = []
        while job := self.store.claim_render():
            self.store.render_done(job.id, error_code, error_code and "boom")
            done.append(job.id)
        return done

    def statuses(self, ids: list[str]) -> list[str]:
        return [self.store.get(i).status for i in ids]  # type: ignore[union-attr]


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = Rig(tmp_path, max_running=2, job_seconds=10)
    yield r
    r.store.close()


def test_jobs_over_max_running_are_throttled_then_run_in_order(rig: Rig) -> None:
    ids = rig.submit(5)
    assert rig.clock.tick(time.time())
    assert rig.statuses(ids) == ["running"] * 2 + ["throttled"] * 3
    assert rig.stats.snapshot().max_running == 2
    assert rig.render() == ids[:2]
    rig.clock.tick(time.time() + 11)
    assert rig.statuses(ids) == ["succeeded"] * 2 + ["running"] * 2 + ["throttled"]
    assert rig.stats.snapshot().max_running == 2


def test_a_job_succeeds_only_when_rendered_and_its_time_is_up(rig: Rig) -> None:
    [job] = rig.submit()
    rig.clock.tick(time.time())
    rig.clock.tick(time.time() + 60)
    assert rig.statuses([job]) == ["running"], "not rendered yet"
    rig.render()
    rig.clock.tick(time.time() + 1)
    assert rig.statuses([job]) == ["running"], "rendered, time not up"
    view = rig.service.view(rig.store.get(job))  # type: ignore[arg-type]
    assert 0 < view.progress < 0.95
    rig.clock.tick(time.time() + 11)
    assert rig.statuses([job]) == ["succeeded"]
    assert not rig.clock.tick(time.time() + 12), "nothing alive: the clock may idle"


def test_a_failed_render_fails_the_job_at_its_time(rig: Rig) -> None:
    [job] = rig.submit()
    rig.clock.tick(time.time())
    rig.render(error_code="INPUT.IMAGE_INVALID")
    rig.clock.tick(time.time() + 11)
    record = rig.store.get(job)
    assert record and record.status == "failed" and record.error_code == "INPUT.IMAGE_INVALID"


def test_cancel_works_while_throttled_and_a_raised_limit_starts_more(rig: Rig) -> None:
    ids = rig.submit(4)
    rig.clock.tick(time.time())
    rig.service.cancel(ids[2])
    rig.faults.update(Faults(max_running=3))
    rig.clock.tick(time.time())
    assert rig.statuses(ids) == ["running", "running", "canceled", "running"]


def test_jitter_fixes_each_jobs_time_when_it_starts(rig: Rig) -> None:
    rig.faults.update(Faults(max_running=20, job_jitter=0.5))
    ids = rig.submit(20)
    rig.clock.tick(time.time())
    times = [rig.store.get(i).job_s for i in ids]  # type: ignore[union-attr]
    assert all(5 <= t <= 15 for t in times) and len(set(times)) > 1  # type: ignore[operator]
    rig.clock.tick(time.time())
    assert [rig.store.get(i).job_s for i in ids] == times  # type: ignore[union-attr]


def test_a_dead_processs_running_jobs_start_again(rig: Rig, tmp_path: Path) -> None:
    ids = rig.submit(3)
    rig.clock.tick(time.time())
    rig.render()
    rig.store.close()
    again = Rig(tmp_path, max_running=2, job_seconds=1)
    try:
        again.clock.tick(time.time())
        assert again.statuses(ids) == ["running", "running", "throttled"]
        assert again.render() == ids[:2], "rendered again by the new process"
        again.clock.tick(time.time() + 2)
        assert again.statuses(ids) == ["succeeded", "succeeded", "running"]
        assert [again.store.get(i).renders for i in ids] == [2, 2, 0]  # type: ignore[union-attr]
    finally:
        again.store.close()


def test_held_jobs_keep_running_past_their_time_until_released(rig: Rig) -> None:
    ids = rig.submit(2)
    rig.faults.update(Faults(hold_running=True))
    rig.clock.tick(time.time())
    rig.render()
    rig.clock.tick(time.time() + 60)
    assert rig.statuses(ids) == ["running"] * 2
    rig.faults.update(Faults(hold_running=False))
    rig.clock.tick(time.time() + 60)
    assert rig.statuses(ids) == ["succeeded"] * 2
