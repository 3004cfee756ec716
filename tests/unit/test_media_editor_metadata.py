"""Editor metadata from real ffmpeg/ffprobe on generated clips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from media_clips import make_clip, make_two_colours

from adapters.media.editor_metadata import ZERO_TIMECODE, EditorMetadata, loudness, read_editor_metadata


@pytest.fixture(scope="module")
def two_colours(tmp_path_factory: pytest.TempPathFactory) -> EditorMetadata:
    return read_editor_metadata(make_two_colours(tmp_path_factory.mktemp("scenes") / "two.mp4", half_s=1.0))


def test_rates_time_base_frame_count_and_duration(two_colours: EditorMetadata) -> None:
    assert (two_colours.r_frame_rate, two_colours.avg_frame_rate) == ("25/1", "25/1")
    assert two_colours.time_base.startswith("1/")
    assert two_colours.frame_count == 50
    assert two_colours.duration_s == pytest.approx(2.0, abs=0.1)
    assert (two_colours.width, two_colours.height) == (160, 90)


def test_keyframe_times_increase_and_include_zero(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "gop.mp4", seconds=3, audio=None, g=25, sc_threshold=0)
    times = read_editor_metadata(clip).keyframe_times_s
    assert times[0] == 0.0
    assert all(a < b for a, b in zip(times, times[1:], strict=False))
    assert times == pytest.approx([0.0, 1.0, 2.0], abs=0.001)


def test_the_cut_between_two_colours_is_the_one_scene_cut(two_colours: EditorMetadata) -> None:
    assert [round(cut.time_s, 2) for cut in two_colours.scene_cuts] == [1.0]
    assert two_colours.scene_cuts[0].score > 10


def test_loudness_of_a_sine_and_audio_present(two_colours: EditorMetadata) -> None:
    assert two_colours.has_audio and two_colours.loudness is not None
    # ffmpeg's sine peaks at 1/8 of full scale: -18 dBFS, and its RMS 3 dB lower
    assert two_colours.loudness.true_peak_dbtp == pytest.approx(-18.1, abs=1.0)
    assert -26.0 < two_colours.loudness.integrated_lufs < -18.0


def test_start_timecode_from_tags_else_zero(two_colours: EditorMetadata, tmp_path: Path) -> None:
    assert two_colours.start_timecode == ZERO_TIMECODE
    tagged = make_clip(tmp_path / "tc.mp4", seconds=1, audio=None, metadata="timecode=01:02:03:04")
    assert read_editor_metadata(tagged).start_timecode == "01:02:03:04"


def test_without_audio_there_is_no_loudness(tmp_path: Path) -> None:
    meta = read_editor_metadata(make_clip(tmp_path / "mute.mp4", seconds=1, audio=None))
    assert not meta.has_audio and meta.loudness is None


def test_the_model_round_trips_through_json(two_colours: EditorMetadata) -> None:
    text = two_colours.model_dump_json()
    assert EditorMetadata.model_validate(json.loads(text)) == two_colours


def test_silence_has_no_integrated_loudness_nor_peak() -> None:
    log = ("Integrated loudness:\n    I:         -70.0 LUFS\n    Threshold:   0.0 LUFS\n\n"
           "  True peak:\n    Peak:       -inf dBFS\n")
    assert loudness(log) is not None and loudness(log).model_dump() == {"integrated_lufs": None, "true_peak_dbtp": None}
    assert loudness("no summary") is None
