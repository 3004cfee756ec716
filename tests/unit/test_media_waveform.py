"""The waveform in audiowaveform's data format v2, from real ffmpeg output and from known PCM."""

from __future__ import annotations

import io
import json
import math
import struct
from array import array
from pathlib import Path

import pytest
from media_clips import SINE_PEAK, make_clip

from adapters.media.ffmpeg_tools import MediaError
from adapters.media.waveform import SAMPLE_RATE, SAMPLES_PER_PIXEL, Waveform, make_waveform, peaks


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("waveform")
    return {  # PCM audio: the sine's peak is exactly ffmpeg's 1/8 of full scale
        "sine": make_clip(d / "sine.mkv", seconds=2, acodec="pcm_s16le"),
        "silence": make_clip(d / "silence.mkv", seconds=2, audio="silence", acodec="pcm_s16le"),
        "stereo_aac": make_clip(d / "stereo.mp4", seconds=1.5, ac=2),
        "no_audio": make_clip(d / "no_audio.mp4", seconds=1, audio=None),
    }


def _written(clip: Path, out: Path, bits: int = 8) -> tuple[dict, Waveform]:
    result = make_waveform(clip, out / "waveform.json", out / "waveform.dat", bits=bits)  # type: ignore[arg-type]
    return json.loads(result.json_path.read_text()), Waveform.from_dat(result.dat_path.read_bytes())


@pytest.mark.parametrize("bits", [8, 16])
def test_json_and_dat_agree_and_stay_in_the_bit_range(clips: dict[str, Path], tmp_path: Path, bits: int) -> None:
    doc, dat = _written(clips["stereo_aac"], tmp_path, bits)
    assert doc == dat.model_dump()
    assert (doc["version"], doc["bits"], doc["sample_rate"], doc["samples_per_pixel"]) == (
        2, bits, SAMPLE_RATE, SAMPLES_PER_PIXEL)
    assert doc["channels"] == 2
    assert len(doc["data"]) == doc["length"] * doc["channels"] * 2
    assert doc["length"] == pytest.approx(1.5 * SAMPLE_RATE / SAMPLES_PER_PIXEL, abs=8)
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    assert all(low <= v <= high for v in doc["data"])
    pairs = zip(doc["data"][::2], doc["data"][1::2], strict=True)
    assert all(lo <= hi for lo, hi in pairs)


def test_dat_header_fields(clips: dict[str, Path], tmp_path: Path) -> None:
    blob = make_waveform(clips["sine"], tmp_path / "w.json", tmp_path / "w.dat").dat_path.read_bytes()
    version, flags, rate, spp, length, channels = struct.unpack_from("<iIiiIi", blob)
    assert (version, flags & 1, rate, spp, channels) == (2, 1, SAMPLE_RATE, SAMPLES_PER_PIXEL, 1)
    assert len(blob) == 24 + length * channels * 2


@pytest.mark.parametrize("bits", [8, 16])
def test_a_sine_reaches_its_amplitude_and_silence_stays_near_zero(
    clips: dict[str, Path], tmp_path: Path, bits: int,
) -> None:
    full = 2 ** (bits - 1)
    _, sine = _written(clips["sine"], tmp_path / "sine", bits)
    peak_in_window = max(sine.data[1::2])
    assert peak_in_window == pytest.approx(SINE_PEAK * full, rel=0.07)
    assert min(sine.data[0::2]) == pytest.approx(-SINE_PEAK * full, rel=0.07)
    _, silence = _written(clips["silence"], tmp_path / "silence", bits)
    assert silence.length > 0 and max(abs(v) for v in silence.data) <= 1


def test_a_video_without_audio_gets_the_stated_empty_waveform(clips: dict[str, Path], tmp_path: Path) -> None:
    doc, dat = _written(clips["no_audio"], tmp_path)
    assert doc["length"] == 0 and doc["data"] == [] and doc["channels"] == 1
    assert (tmp_path / "waveform.dat").stat().st_size == 24


def test_peaks_take_min_and_max_per_window_and_channel_including_a_short_last_window() -> None:
    # two channels, windows of 4 samples, 10 frames: 3 windows, the last of 2 frames
    left = [0, 5, -3, 2, 7, -8, 1, 1, 100, -100]
    right = [-(v // 2) for v in left]
    pcm = array("h", [v for pair in zip(left, right, strict=True) for v in pair]).tobytes()
    got = list(peaks(io.BytesIO(pcm), 2, samples_per_pixel=4, bits=16))
    expected = []
    for start in range(0, 10, 4):
        for channel in (left, right):
            expected += [min(channel[start:start + 4]), max(channel[start:start + 4])]
    assert got == expected
    assert len(got) == math.ceil(10 / 4) * 2 * 2


def test_peaks_at_8_bits_keep_the_extremes_in_range() -> None:
    pcm = array("h", [-32768, 32767] * 300).tobytes()
    assert set(peaks(io.BytesIO(pcm), 1, samples_per_pixel=256, bits=8)) == {-128, 127}


def test_a_dat_whose_size_disagrees_with_its_header_is_refused() -> None:
    blob = Waveform(channels=1, sample_rate=48000, samples_per_pixel=256, bits=8, length=2, data=[1, 2, 3, 4]).to_dat()
    assert Waveform.from_dat(blob).data == [1, 2, 3, 4]
    with pytest.raises(MediaError, match="header says"):
        Waveform.from_dat(blob[:-1])
