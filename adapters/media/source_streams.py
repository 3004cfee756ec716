"""One ffprobe of a video the editor outputs are made from: its format, its first video stream and
its first audio stream, as ffprobe reports them.

The editor outputs (CMAF, waveform, sprite, editor metadata) each need a few raw fields the
pipeline's `MediaInfo` does not keep (frame rates, time base, B-frame delay, channels, tags), so
they share this one read. A file without a video stream is refused here, as unreadable: the same
bytes fail the same way, so it is not worth another try.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from adapters.media.ffmpeg_tools import MediaLimits, MediaUnreadable, probe_json
from adapters.media.transcode import MediaInfo, PathLike, media_info

NO_VIDEO = "no video stream"


@dataclass(frozen=True)
class SourceStreams:
    """What ffprobe said of one file: `info` as the pipeline records it, plus the raw dictionaries."""

    info: MediaInfo
    format: dict[str, Any]
    video: dict[str, Any]
    audio: dict[str, Any] | None
    streams: tuple[dict[str, Any], ...]

    @property
    def duration_s(self) -> float:
        return self.info.duration_s or float(self.video.get("duration") or 0.0)

    @property
    def frame_rate(self) -> Fraction:
        """The stream's frame rate (`avg_frame_rate`, else `r_frame_rate`); 25/1 when ffprobe knows neither."""
        for key in ("avg_frame_rate", "r_frame_rate"):
            rate = rational(self.video.get(key))
            if rate:
                return rate
        return Fraction(25)

    @property
    def reorders_frames(self) -> bool:
        """Whether the video has B-frames, so its decode times run behind its presentation times."""
        return int(self.video.get("has_b_frames") or 0) > 0


def rational(text: str | None) -> Fraction | None:
    """ffprobe's "num/den" as a Fraction; None for a missing or zero ("0/0") value."""
    try:
        value = Fraction(text or "")
    except (ValueError, ZeroDivisionError):
        return None
    return value or None


def read_source(path: PathLike, limits: MediaLimits | None = None) -> SourceStreams:
    """Probe `path` once; MediaUnreadable when ffprobe cannot read it or it has no video stream."""
    data = probe_json(path, limits=limits)
    info = media_info(data, path)
    streams = data.get("streams") or []
    video = next((s for s in streams if s.get("codec_type") == "video"), None)
    if video is None:
        raise MediaUnreadable(f"cannot use {path}: {NO_VIDEO}", NO_VIDEO)
    audio = next((s for s in streams if s.get("codec_type") == "audio"), None)
    return SourceStreams(info=info, format=data.get("format") or {}, video=video, audio=audio, streams=tuple(streams))
