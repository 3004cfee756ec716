"""Keyframe times and frame count from a video's packets, and the segment-boundary rule the CMAF step copies by."""

from __future__ import annotations

from pathlib import Path

import pytest
from media_clips import make_clip

from adapters.media.keyframes import keyframes_open_every, read_video_packets


def test_forced_keyframes_are_listed_from_zero_with_the_frame_count(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "gop.mp4", seconds=3, force_key_frames="expr:gte(t,n_forced*1)")
    packets = read_video_packets(clip)
    assert packets.frame_count == 75
    assert packets.keyframe_times_s == pytest.approx((0.0, 1.0, 2.0), abs=0.001)


@pytest.mark.parametrize(("keys", "expected"), [
    ((0.0, 4.0, 8.0), True),
    ((0.0, 2.0, 4.0, 6.0, 8.0), True),
    ((0.0, 4.02, 8.0), True),    # within a frame after the boundary
    ((0.0, 3.96, 8.0), False),   # before it: the segment would end early
    ((0.0, 4.0), False),         # none at 8 s
    ((0.02, 4.0, 8.0), True),    # within a frame of 0
    ((0.2, 4.0, 8.0), False),
])
def test_keyframes_open_every_segment(keys: tuple[float, ...], expected: bool) -> None:
    assert keyframes_open_every(keys, 4, 9.0, 0.04) is expected


def test_a_boundary_within_the_last_frame_needs_no_keyframe() -> None:
    assert keyframes_open_every((0.0, 4.0), 4, 8.02, 0.04)
