"""Automatic checks of a rendition before a person reviews it: duration, black frames, frozen
picture, silence and frame ratio.

One ffmpeg pass decodes the file once through `blackdetect`, `freezedetect` and `silencedetect`
(to a null muxer) and the intervals they log are summed; a detection still open at the end of the
file runs to the end. Each check says what it measured, so the reviewer sees why it failed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import ffmpeg

from adapters.media.ffmpeg_tools import ffmpeg_log
from adapters.media.transcode import PathLike, frame_size, probe

BLACK_MIN_S = 0.3  # shortest black stretch that counts
FREEZE_MIN_S = 0.5  # shortest frozen stretch that counts
SILENCE_MIN_S = 0.5
SILENCE_NOISE_DB = -60
RATIO_TOLERANCE = 0.02

_NUM = r"(-?\d+(?:\.\d+)?)"
_PATTERNS = {
    "black": (re.compile(rf"black_start:{_NUM}"), re.compile(rf"black_end:{_NUM}")),
    "frozen": (re.compile(rf"freeze_start: {_NUM}"), re.compile(rf"freeze_end: {_NUM}")),
    "silence": (re.compile(rf"silence_start: {_NUM}"), re.compile(rf"silence_end: {_NUM}")),
}


@dataclass(frozen=True)
class Expectations:
    aspect_ratio: str
    duration_s: float
    duration_tolerance_s: float
    audio_expected: bool
    max_black_ratio: float
    max_frozen_ratio: float


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str


def detected_seconds(log: str, kind: str, duration_s: float) -> float:
    """Total seconds the `kind` filter reported (black / frozen / silence) in an ffmpeg log."""
    start_re, end_re = _PATTERNS[kind]
    total, open_at = 0.0, None
    for line in log.splitlines():
        if (m := start_re.search(line)) is not None:
            open_at = float(m.group(1))
        if (m := end_re.search(line)) is not None and open_at is not None:
            total += max(0.0, float(m.group(1)) - open_at)
            open_at = None
    if open_at is not None:
        total += max(0.0, duration_s - open_at)
    return min(total, duration_s)


def _detect_log(path: PathLike, has_audio: bool) -> str:
    source = ffmpeg.input(os.fspath(path))
    video = (source.video.filter("blackdetect", d=BLACK_MIN_S, pix_th=0.10)
             .filter("freezedetect", n="-60dB", d=FREEZE_MIN_S))
    streams = [video]
    if has_audio:
        streams.append(source.audio.filter("silencedetect", n=f"{SILENCE_NOISE_DB}dB", d=SILENCE_MIN_S))
    return ffmpeg_log(ffmpeg.output(*streams, "-", f="null"), f"checks of {path}")


def check_video(path: PathLike, expect: Expectations) -> list[Check]:
    """Every check on one file; MediaError when ffmpeg cannot read it."""
    info = probe(path)
    duration = info.duration_s or 0.0
    log = _detect_log(path, info.has_audio)
    checks = [Check("duration", abs(duration - expect.duration_s) <= expect.duration_tolerance_s,
                    f"{duration:.2f} s, plan {expect.duration_s:g} s ± {expect.duration_tolerance_s:g} s")]
    for kind, limit in (("black", expect.max_black_ratio), ("frozen", expect.max_frozen_ratio)):
        seconds = detected_seconds(log, kind, duration)
        share = seconds / duration if duration else 1.0
        checks.append(Check(kind, share <= limit, f"{seconds:.2f} s {kind} ({share:.0%}, at most {limit:.0%})"))
    if expect.audio_expected:
        silent = detected_seconds(log, "silence", duration) if info.has_audio else duration
        loud = duration - silent
        checks.append(Check("silence", info.has_audio and silent < duration * 0.9,
                            f"{loud:.2f} s with sound" if info.has_audio else "no audio track"))
    want_w, want_h = frame_size(expect.aspect_ratio)
    got = (info.width or 0) / (info.height or 1)
    ok = abs(got - want_w / want_h) <= RATIO_TOLERANCE * (want_w / want_h)
    checks.append(Check("ratio", ok, f"{info.width}x{info.height}, plan {expect.aspect_ratio}"))
    return checks
