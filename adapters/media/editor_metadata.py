"""What an editing timeline needs to know of a video before it shows it: rates, time base, frame
count, keyframes, start timecode, scene cuts, loudness, audio present.

Three reads: ffprobe of the streams (rates, time base, timecode tags), ffprobe of the video's
packets (keyframes, frame count; no decoding) and one ffmpeg pass decoding the video through
`scdet` and the audio through `ebur128` into the null muxer, whose log gives the scene cuts and the
integrated loudness (LUFS) and true peak (dBTP).
"""

from __future__ import annotations

import math
import os
import re

import ffmpeg
from pydantic import BaseModel

from adapters.media.ffmpeg_tools import ffmpeg_log
from adapters.media.keyframes import read_video_packets
from adapters.media.source_streams import SourceStreams, read_source
from adapters.media.transcode import PathLike, RunOptions

ZERO_TIMECODE = "00:00:00:00"
SCENE_THRESHOLD = 10.0  # scdet's score (0-100) from which a frame starts a new scene: ffmpeg's default
_SCENE = re.compile(r"lavfi\.scd\.score:\s*(?P<score>[\d.]+),\s*lavfi\.scd\.time:\s*(?P<time>[\d.]+)")
_INTEGRATED = re.compile(r"Integrated loudness:\s*I:\s*(?P<value>-?[\d.]+|-?inf)\s*LUFS", re.S)
_TRUE_PEAK = re.compile(r"True peak:\s*Peak:\s*(?P<value>-?[\d.]+|-?inf)\s*dBFS", re.S)
_TIMECODE = re.compile(r"^\d{2}:\d{2}:\d{2}[:;.]\d{2}$")


class SceneCut(BaseModel):
    time_s: float
    score: float  # scdet's score, 0-100


class Loudness(BaseModel):
    """EBU R128: integrated loudness (None for silence, under the gate) and true peak (None when silent)."""

    integrated_lufs: float | None
    true_peak_dbtp: float | None


class EditorMetadata(BaseModel):
    """The editor's view of one video; times in seconds from its first frame."""

    duration_s: float
    width: int | None
    height: int | None
    r_frame_rate: str
    avg_frame_rate: str
    time_base: str
    frame_count: int
    keyframe_times_s: list[float]
    start_timecode: str
    scene_cuts: list[SceneCut]
    has_audio: bool
    loudness: Loudness | None  # None without audio


def start_timecode(source: SourceStreams) -> str:
    """The `timecode` tag of the video stream, of any stream or of the container; else 00:00:00:00."""
    for tags in (source.video.get("tags"), *(s.get("tags") for s in source.streams), source.format.get("tags")):
        value = (tags or {}).get("timecode", "")
        if _TIMECODE.match(value):
            return value
    return ZERO_TIMECODE


def scene_cuts(log: str) -> list[SceneCut]:
    """The scene changes `scdet` logged."""
    return [SceneCut(time_s=float(m["time"]), score=float(m["score"])) for m in _SCENE.finditer(log)]


def loudness(log: str) -> Loudness | None:
    """The integrated loudness and true peak of `ebur128`'s last summary (ffmpeg may configure the
    graph twice, and the first summary is of no audio); None when it logged none."""
    integrated = _INTEGRATED.findall(log)
    if not integrated:
        return None
    peaks = _TRUE_PEAK.findall(log)
    return Loudness(integrated_lufs=_finite(integrated[-1]), true_peak_dbtp=_finite(peaks[-1]) if peaks else None)


def _finite(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) and value > -70.0 else None  # -70 LUFS: ebur128's floor, silence


def _analysis_log(src: PathLike, source: SourceStreams, options: RunOptions) -> str:
    inp = ffmpeg.input(os.fspath(src))
    streams = [inp.video.filter("scdet", threshold=SCENE_THRESHOLD)]
    if source.audio is not None:
        streams.append(inp.audio.filter("ebur128", peak="true", framelog="verbose"))
    out = ffmpeg.output(*streams, "-", f="null")
    return ffmpeg_log(out, f"editor metadata of {src}", timeout_s=options.budget_s(source.info), limits=options.limits)


def read_editor_metadata(src: PathLike, *, options: RunOptions | None = None) -> EditorMetadata:
    """Measure `src`; MediaUnreadable for an input ffprobe cannot read or without video, MediaError
    when ffmpeg fails decoding it."""
    options = options or RunOptions()
    source = read_source(src, options.limits)
    packets = read_video_packets(src, options.limits)
    log = _analysis_log(src, source, options)
    nb_frames = int(source.video.get("nb_frames") or 0)
    return EditorMetadata(
        duration_s=source.duration_s,
        width=source.info.width,
        height=source.info.height,
        r_frame_rate=source.video.get("r_frame_rate") or "0/0",
        avg_frame_rate=source.video.get("avg_frame_rate") or "0/0",
        time_base=source.video.get("time_base") or "0/0",
        frame_count=nb_frames or packets.frame_count,
        keyframe_times_s=list(packets.keyframe_times_s),
        start_timecode=start_timecode(source),
        scene_cuts=scene_cuts(log),
        has_audio=source.audio is not None,
        loudness=loudness(log) if source.audio is not None else None,
    )
