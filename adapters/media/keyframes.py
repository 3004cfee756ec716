"""Where a video's keyframes fall, from its packets (ffprobe's `K` flag): no decoding.

Editors snap cuts and seeks to keyframes, and the CMAF step copies a stream only when a keyframe
opens every segment. One ffprobe pass over the first video stream's packets gives both the
keyframe times and the frame count (one packet per frame in MP4 and MOV).
"""

from __future__ import annotations

from dataclasses import dataclass

from adapters.media.ffmpeg_tools import MediaLimits, MediaUnreadable, probe_json
from adapters.media.transcode import PathLike

_PACKETS = ("-select_streams", "v:0", "-show_entries", "packet=pts_time,flags")


@dataclass(frozen=True)
class VideoPackets:
    """Keyframe times in seconds from the first frame shown (increasing, the first is 0) and the frame count."""

    keyframe_times_s: tuple[float, ...]
    frame_count: int


def read_video_packets(path: PathLike, limits: MediaLimits | None = None, *, timeout_s: float = 60.0) -> VideoPackets:
    """List the first video stream's packets; MediaUnreadable when it has none."""
    packets = probe_json(path, limits=limits, timeout_s=timeout_s, show=_PACKETS).get("packets") or []
    times = [(float(p["pts_time"]), "K" in p.get("flags", "")) for p in packets if _number(p.get("pts_time"))]
    if not times:
        raise MediaUnreadable(f"cannot use {path}: no video packets", "no video packets")
    start = min(t for t, _ in times)
    keys = sorted({round(t - start, 6) for t, key in times if key})
    return VideoPackets(keyframe_times_s=tuple(keys), frame_count=len(packets))


def keyframes_open_every(keyframe_times_s: tuple[float, ...], segment_s: float, duration_s: float,
                         frame_s: float) -> bool:
    """Whether a keyframe falls within one frame after 0 and after every multiple of `segment_s`
    before the end, so that cutting at the first keyframe past each boundary gives equal segments."""
    boundary = 0.0
    while boundary < duration_s - frame_s:
        if not any(boundary - 1e-6 <= t < boundary + frame_s for t in keyframe_times_s):
            return False
        boundary += segment_s
    return True


def _number(value: object) -> bool:
    try:
        float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return True
