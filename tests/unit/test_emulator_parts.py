"""The emulator's pure parts: job time draw, progress, render cache key and bound, fast frame
sizes, runtime tuning and the stats board."""

from __future__ import annotations

import random
from fractions import Fraction
from pathlib import Path

import pytest

from adapters.media.transcode import PROXY_FRAME
from emulator.cache import RenderCache, clip_key
from emulator.config import EmulatorConfig
from emulator.faults import FaultBoard, UnknownDialect
from emulator.render import FAST_FPS, FPS, fast_frame_size, render_profile
from emulator.stats import StatsBoard
from emulator.timing import PROGRESS_CAP, draw_job_seconds, running_progress
from emulator.wire import FaultRates, Faults

CLIP = {
    "image_sha256": "ab" * 32,
    "aspect_ratio": "9:16",
    "duration_s": 2.0,
    "overlay_lines": ["A", "B"],
    "mode": "fast",
}


def test_no_jitter_is_exactly_the_base() -> None:
    assert draw_job_seconds(3.0, 0.0, random.Random(1)) == 3.0


def test_jitter_stays_in_its_band_and_spreads() -> None:
    rng = random.Random(7)
    draws = [draw_job_seconds(10.0, 0.2, rng) for _ in range(500)]
    assert all(8.0 <= d <= 12.0 for d in draws)
    assert min(draws) < 8.5 and max(draws) > 11.5  # uniform over the band, not a constant


def test_progress_rises_with_time_and_stops_below_one() -> None:
    assert running_progress(100.0, 4.0, 100.0) == 0.0
    assert running_progress(100.0, 4.0, 102.0) == pytest.approx(PROGRESS_CAP / 2)
    assert running_progress(100.0, 4.0, 900.0) == PROGRESS_CAP < 1.0
    assert running_progress(100.0, 0.0, 100.0) == PROGRESS_CAP


def test_clip_key_is_stable_and_covers_every_input() -> None:
    assert clip_key(**CLIP) == clip_key(**dict(CLIP))
    changed = [
        ("image_sha256", None),
        ("aspect_ratio", "1:1"),
        ("duration_s", 3.0),
        ("overlay_lines", ["A"]),
        ("overlay_lines", ["B", "A"]),
        ("mode", "full"),
    ]
    keys = {clip_key(**{**CLIP, name: value}) for name, value in changed}
    assert len(keys) == len(changed) and clip_key(**CLIP) not in keys
    assert clip_key(**{**CLIP, "duration_s": 2}) == clip_key(**CLIP)  # 2 and 2.0 are one clip


def test_cache_hits_link_the_clip_and_evict_the_least_recent(tmp_path: Path) -> None:
    cache = RenderCache(tmp_path / "cache", max_entries=2)
    clips = {}
    for name in "abc":
        clips[name] = tmp_path / f"{name}.mp4"
        clips[name].write_bytes(name.encode() * 10)
    out = tmp_path / "out" / "job.mp4"
    assert not cache.fetch("a", out)
    cache.store("a", clips["a"])
    cache.store("b", clips["b"])
    assert cache.fetch("a", out) and out.read_bytes() == clips["a"].read_bytes()  # "a" used last
    cache.store("c", clips["c"])
    assert sorted(p.stem for p in (tmp_path / "cache").glob("*.mp4")) == ["a", "c"]
    assert not cache.fetch("b", out) and out.read_bytes() == clips["a"].read_bytes()


def test_a_cache_of_zero_entries_is_off(tmp_path: Path) -> None:
    cache = RenderCache(tmp_path / "cache", max_entries=0)
    src = tmp_path / "a.mp4"
    src.write_bytes(b"x")
    cache.store("a", src)
    assert not cache.fetch("a", tmp_path / "out.mp4") and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("ratio", list(PROXY_FRAME))
def test_fast_frames_keep_the_ratio_exactly(ratio: str) -> None:
    width, height = fast_frame_size(ratio)
    proxy_w, proxy_h = PROXY_FRAME[ratio]
    assert Fraction(width, height) == Fraction(proxy_w, proxy_h)
    assert 144 <= min(width, height) <= 180 and width % 2 == height % 2 == 0


def test_render_profiles() -> None:
    fast, full = render_profile("9:16", "fast"), render_profile("9:16", "full")
    assert (fast.width, fast.height, fast.fps) == (180, 320, FAST_FPS) and 6 <= FAST_FPS <= 10
    assert (full.width, full.height, full.fps, full.crf) == (540, 960, FPS, None)  # today's output


def test_tuning_overrides_fall_back_to_the_config() -> None:
    config = EmulatorConfig(job_seconds=3, job_jitter=0.1, max_running=50, max_queued=100)
    board = FaultBoard()
    assert board.tuning(config).max_running == 50
    board.update(Faults(max_running=2, job_jitter=0.5))
    tuning = board.tuning(config)
    assert (tuning.max_running, tuning.job_jitter, tuning.max_queued, tuning.job_seconds) == (2, 0.5, 100, 3)
    board.update(Faults(max_queued=7))
    assert (board.tuning(config).max_running, board.tuning(config).max_queued) == (2, 7)  # others kept
    board.reset()
    assert board.tuning(config).max_running == 50


def _draws(board: FaultBoard, n: int) -> dict[str, int]:
    """How often each rated fault applied over `n` submits, URLs and events."""
    seen = {"429": 0, "5xx": 0, "unknown": 0, "expired": 0, "duplicate": 0, "reorder": 0, "drop": 0}
    for _ in range(n):
        status = board.take_submit_status()
        seen["429"] += status == 429
        seen["5xx"] += status is not None and status >= 500
        for key, counter in (("unknown", "submit_hang_after_create"), ("expired", "expire_output_urls"),
                             ("duplicate", "duplicate_webhook"), ("reorder", "reorder_webhooks"),
                             ("drop", "drop_webhook")):
            seen[key] += board.take(counter)
    return seen


def test_fault_rates_apply_at_about_their_chance_and_repeat_with_the_seed() -> None:
    rates = FaultRates(seed=7, submit_unknown=0.1, submit_429=0.1, submit_5xx=0.05, expire_output_url=0.1,
                       duplicate_webhook=0.2, reorder_webhook=0.2, drop_webhook=0.2)
    board = FaultBoard()
    assert _draws(board, 200) == dict.fromkeys(["429", "5xx", "unknown", "expired", "duplicate", "reorder", "drop"], 0)
    board.update(Faults(rates=rates))
    first = _draws(board, 4000)
    expected = {"429": 0.1, "5xx": 0.05, "unknown": 0.1, "expired": 0.1, "duplicate": 0.2, "reorder": 0.2, "drop": 0.2}
    for key, chance in expected.items():
        assert abs(first[key] / 4000 - chance) < 0.03, (key, first)
    board.update(Faults(rates=rates))  # the same seed again: the same faults in the same order
    assert _draws(board, 4000) == first
    board.update(Faults(rates=rates.model_copy(update={"seed": 8})))
    assert _draws(board, 4000) != first
    board.reset()
    assert _draws(board, 200)["drop"] == 0


def test_counters_go_first_and_rates_keep_the_others() -> None:
    board = FaultBoard()
    board.update(Faults(rates=FaultRates(seed=1, submit_5xx=1.0), submit_status=429, submit_status_count=2))
    assert [board.take_submit_status() for _ in range(2)] == [429, 429]
    assert {board.take_submit_status() for _ in range(50)} == {500, 502, 503}
    board.update(Faults(drop_webhook=1))  # a counter set later leaves the rates alone
    assert board.snapshot().rates.submit_5xx == 1.0
    with pytest.raises(ValueError, match="at most 1"):
        FaultRates(submit_429=0.6, submit_5xx=0.5)


def test_faults_of_one_dialect_leave_the_others_alone() -> None:
    board = FaultBoard(["runway", "kling"])
    board.update(Faults(dialect="runway", fail_next=1, submit_status=503, submit_status_count=1,
                        status_outage_s=60, rates=FaultRates(seed=3, drop_webhook=1.0)))
    assert board.take_submit_status("kling") is None and board.take_submit_status("emulator") is None
    assert not board.in_outage("status_outage_s", "kling") and not board.in_outage("status_outage_s", "emulator")
    assert not board.take("fail_next", "kling") and not board.take("drop_webhook", "kling")
    assert board.take_submit_status("runway") == 503 and board.take_submit_status("runway") is None
    assert board.in_outage("status_outage_s", "runway")
    assert board.take("fail_next", "runway") and not board.take("fail_next", "runway")
    assert board.take("drop_webhook", "runway")  # the dialect's own rate
    assert board.snapshot("runway").status_outage_s > 0 and board.snapshot("kling").status_outage_s == 0
    assert board.snapshot().fail_next == 0 and board.snapshot().dialect is None


def test_faults_for_all_apply_to_every_dialect_after_its_own() -> None:
    board = FaultBoard(["runway"])
    board.update(Faults(fail_next=1))
    board.update(Faults(dialect="runway", fail_next=1))
    assert board.take("fail_next", "runway") and board.snapshot("runway").fail_next == 0
    assert board.snapshot().fail_next == 1  # the dialect's own went first
    assert board.take("fail_next", "emulator") and not board.take("fail_next", "runway")
    board.update(Faults(dialect="runway", drop_all_webhooks=True))
    assert board.flag("drop_all_webhooks", "runway") and not board.flag("drop_all_webhooks", "emulator")
    board.reset()
    assert not board.flag("drop_all_webhooks", "runway")


def test_faults_refuse_an_unknown_dialect_and_tuning_for_one() -> None:
    board = FaultBoard(["runway"])
    with pytest.raises(UnknownDialect, match="'pika'"):
        board.update(Faults(dialect="pika", fail_next=1))
    with pytest.raises(UnknownDialect, match="max_running: tuning is for the whole emulator"):
        board.update(Faults(dialect="runway", max_running=2))
    with pytest.raises(UnknownDialect, match="hold_running: tuning is for the whole emulator"):
        board.update(Faults(dialect="runway", hold_running=True))
    assert board.update(Faults(dialect="emulator", fail_next=2)).dialect == "emulator"


def test_stats_board_counts_peaks_and_rates() -> None:
    board = StatsBoard()
    board.add("jobs_created", 4)
    board.add("status_calls", 10)
    board.peak("max_running", 3)
    board.peak("max_running", 2)
    seen = board.snapshot()
    assert (seen.max_running, seen.status_calls_per_job) == (3, 2.5)
    assert board.reset().status_calls_per_job == 0.0 and board.snapshot().max_running == 0


def test_stats_board_keeps_the_busiest_whole_second() -> None:
    now = [100.0]
    board = StatsBoard(clock=lambda: now[0])
    for at in (100.0, 100.5, 100.999, 101.0, 101.2, 102.9, 102.95, 102.99, 102.999):
        now[0] = at
        board.per_second("status_calls_peak_per_s")
    assert board.snapshot().status_calls_peak_per_s == 4  # 102.0 <= t < 103.0; 100.999 and 101.0 apart
    now[0] = 103.0
    board.per_second("status_calls_peak_per_s")
    assert board.snapshot().status_calls_peak_per_s == 4
    assert board.reset().status_calls_peak_per_s == 0
    board.per_second("status_calls_peak_per_s")  # the second counted before the reset starts over
    assert board.snapshot().status_calls_peak_per_s == 1
