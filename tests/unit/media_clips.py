"""Tiny generated clips for the media adapter's tests (lavfi sources, a few seconds, small frames)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ffmpeg

from adapters.media.ffmpeg_tools import run_ffmpeg

SINE_PEAK = 1 / 8  # ffmpeg's `sine` source is a sine of amplitude 1/8 of full scale


def make_clip(path: Path, *, seconds: float, size: str = "160x90", audio: str | None = "sine",
              video: str = "testsrc2", **codecs: Any) -> Path:
    """A clip of `video` (a lavfi source) with `audio`: "sine", "silence" or None. `codecs` are
    ffmpeg output options (default H.264 + AAC)."""
    streams = [ffmpeg.input(f"{video}=s={size}:r=25:d={seconds}", f="lavfi").video]
    if audio == "sine":
        streams.append(ffmpeg.input(f"sine=frequency=440:duration={seconds}", f="lavfi").audio)
    elif audio == "silence":
        streams.append(ffmpeg.input(f"anullsrc=r=48000:cl=mono:d={seconds}", f="lavfi").audio)
    options = {"vcodec": "libx264", "preset": "ultrafast", "pix_fmt": "yuv420p", "acodec": "aac"} | codecs
    run_ffmpeg(ffmpeg.output(*streams, str(path), **options), "test clip")
    return path


def make_two_colours(path: Path, *, half_s: float = 1.0, size: str = "160x90") -> Path:
    """Red for `half_s` seconds, then blue: one scene cut at `half_s`; with a sine track."""
    red = ffmpeg.input(f"color=c=red:s={size}:r=25:d={half_s}", f="lavfi").video
    blue = ffmpeg.input(f"color=c=blue:s={size}:r=25:d={half_s}", f="lavfi").video
    sine = ffmpeg.input(f"sine=frequency=440:duration={2 * half_s}", f="lavfi").audio
    both = ffmpeg.concat(red, blue, v=1, a=0)
    run_ffmpeg(ffmpeg.output(both, sine, str(path), vcodec="libx264", preset="ultrafast", pix_fmt="yuv420p",
                             acodec="aac"), "two-colour clip")
    return path


def make_audio_only(path: Path, *, seconds: float = 1.0) -> Path:
    run_ffmpeg(ffmpeg.input(f"sine=frequency=440:duration={seconds}", f="lavfi").output(str(path), acodec="aac"),
               "audio-only clip")
    return path


def make_truncated(path: Path, whole: Path) -> Path:
    """The first third of `whole` (an MP4 whose index comes last): its index is cut off."""
    data = whole.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    return path
