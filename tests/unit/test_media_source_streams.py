"""Bad inputs to the editor outputs: refused with the classified errors, and nothing written."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import pytest
from media_clips import make_audio_only, make_clip, make_truncated

from adapters.media.cmaf import make_cmaf
from adapters.media.editor_metadata import read_editor_metadata
from adapters.media.ffmpeg_tools import MediaUnreadable
from adapters.media.source_streams import NO_VIDEO, rational, read_source
from adapters.media.sprite import make_sprite
from adapters.media.waveform import make_waveform

MAKERS: dict[str, Callable[[Path, Path], object]] = {
    "cmaf": lambda src, out: make_cmaf(src, out / "cmaf"),
    "waveform": lambda src, out: make_waveform(src, out / "w.json", out / "w.dat"),
    "sprite": lambda src, out: make_sprite(src, out / "sprite.jpg", out / "sprite.vtt"),
    "metadata": lambda src, out: read_editor_metadata(src),
}


@pytest.fixture(scope="module")
def bad(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("bad")
    whole = make_clip(d / "whole.mp4", seconds=2)
    return {"audio_only": make_audio_only(d / "audio.m4a"), "truncated": make_truncated(d / "cut.mp4", whole)}


def test_the_source_read_keeps_the_raw_streams(tmp_path: Path) -> None:
    source = read_source(make_clip(tmp_path / "c.mp4", seconds=1, bf=2))
    assert source.info.video_codec == "h264" and source.audio is not None
    assert source.frame_rate == Fraction(25) and source.reorders_frames
    assert source.duration_s == pytest.approx(1.0, abs=0.1)


def test_rational_reads_ffprobe_rates() -> None:
    assert rational("30000/1001") == Fraction(30000, 1001)
    assert rational("0/0") is None and rational(None) is None and rational("junk") is None


@pytest.mark.parametrize("maker", list(MAKERS))
def test_a_file_without_video_is_unreadable_and_nothing_is_written(bad: dict[str, Path], tmp_path: Path,
                                                                 maker: str) -> None:
    with pytest.raises(MediaUnreadable, match=NO_VIDEO) as raised:
        MAKERS[maker](bad["audio_only"], tmp_path)
    assert not raised.value.retryable
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("maker", list(MAKERS))
def test_a_truncated_file_is_unreadable_and_nothing_is_written(bad: dict[str, Path], tmp_path: Path,
                                                               maker: str) -> None:
    with pytest.raises(MediaUnreadable, match="cannot probe") as raised:
        MAKERS[maker](bad["truncated"], tmp_path)
    assert "moov atom not found" in raised.value.verdict
    assert list(tmp_path.iterdir()) == []
