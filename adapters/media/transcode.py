"""The media steps of the transcode activity: probe, proxy MP4, HLS VOD, thumbnail.

Every output goes to a path the caller chose (deterministic per asset + profile) through a temp
file that replaces it only when ffmpeg succeeded, so an activity retry just runs the step again.
Presets favour speed on small machines: a proxy is a preview, not a master.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import ffmpeg
from pydantic import BaseModel, computed_field

from adapters.media.ffmpeg_tools import (
    MediaError,
    MediaLimitExceeded,
    MediaLimits,
    Progress,
    atomic_directory,
    atomic_output,
    probe_json,
    run_ffmpeg,
)

__all__ = [
    "PROXY_FRAME",
    "HLS_SEGMENT_S",
    "HlsOutput",
    "MediaError",
    "MediaInfo",
    "RunOptions",
    "check_input_caps",
    "frame_size",
    "make_hls",
    "make_proxy",
    "make_thumbnail",
    "media_info",
    "probe",
]

# The one table of frame sizes per aspect ratio (proxy size; renders scale it).
PROXY_FRAME: dict[str, tuple[int, int]] = {"9:16": (360, 640), "16:9": (640, 360), "1:1": (480, 480)}
HLS_SEGMENT_S = 2
HLS_PLAYLIST = "index.m3u8"
# Keyframes every HLS_SEGMENT_S so that the HLS step can cut the proxy by stream copy.
_H264: dict[str, Any] = {
    "vcodec": "libx264",
    "preset": "veryfast",
    "crf": 26,
    "pix_fmt": "yuv420p",
    "force_key_frames": f"expr:gte(t,n_forced*{HLS_SEGMENT_S})",
}
_AAC: dict[str, Any] = {"acodec": "aac", "audio_bitrate": "96k", "ac": 2, "ar": 48000}
_H264_AAC = _H264 | _AAC

PathLike = str | os.PathLike[str]


class MediaInfo(BaseModel):
    """What the pipeline records about a media file (asset rows, output checks)."""

    format_name: str
    duration_s: float | None = None
    width: int | None = None
    height: int | None = None
    video_codec: str | None = None
    audio_codec: str | None = None
    bit_rate: int | None = None
    size: int | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def has_audio(self) -> bool:
        return self.audio_codec is not None


class RunOptions(BaseModel):
    """How one media step runs: caps, the progress callback (heartbeats) and an optional input
    read rate (< 1: slower than real time; the `slow_transcode` failpoint uses it)."""

    limits: MediaLimits = MediaLimits()
    on_progress: Progress | None = None
    read_rate: float | None = None

    def budget_s(self, info: MediaInfo) -> float:
        """The step's time budget: grows with duration and resolution (720p-seconds), and with a
        slowed input read."""
        duration = info.duration_s or 10.0
        scale = max(1.0, (info.width or 1280) * (info.height or 720) / (1280 * 720))
        budget = 90.0 + 6.0 * duration * scale
        if self.read_rate:
            budget += duration / self.read_rate
        return budget

    def run(self, stream: Any, what: str, info: MediaInfo) -> None:
        run_ffmpeg(stream, what, timeout_s=self.budget_s(info), limits=self.limits, on_progress=self.on_progress)

    def input_options(self) -> dict[str, Any]:
        return {"readrate": self.read_rate} if self.read_rate else {}


def check_input_caps(info: MediaInfo, *, max_pixels: int, max_duration_s: float) -> None:
    """Refuse inputs beyond the caps before ffmpeg spends anything on them."""
    pixels = (info.width or 0) * (info.height or 0)
    if pixels > max_pixels:
        raise MediaLimitExceeded(f"input is {info.width}x{info.height}: over the {max_pixels}-pixel limit")
    if (info.duration_s or 0) > max_duration_s:
        raise MediaLimitExceeded(f"input lasts {info.duration_s:.1f} s: over the {max_duration_s:.0f} s limit")


class HlsOutput(BaseModel):
    playlist: Path
    segments: list[Path]


def _num(value: Any, kind: type[int] | type[float]) -> Any:
    try:
        return kind(float(value))
    except (TypeError, ValueError):
        return None


def probe(path: PathLike, limits: MediaLimits | None = None) -> MediaInfo:
    """Probe a file (ffprobe under `limits`, like ffmpeg); MediaError if it cannot be read or has no streams."""
    return media_info(probe_json(path, limits=limits), path)


def media_info(data: dict[str, Any], path: PathLike) -> MediaInfo:
    """`MediaInfo` from ffprobe's format and streams of `path` (`probe_json`); MediaError when it has no streams."""
    fmt = data.get("format") or {}
    streams = data.get("streams") or []
    if not fmt.get("format_name") or not streams:
        raise MediaError(f"cannot probe {path}: not a media file")
    video = next((s for s in streams if s.get("codec_type") == "video"), {})
    audio = next((s for s in streams if s.get("codec_type") == "audio"), {})
    return MediaInfo(
        format_name=fmt["format_name"],
        duration_s=_num(fmt.get("duration"), float),
        width=_num(video.get("width"), int),
        height=_num(video.get("height"), int),
        video_codec=video.get("codec_name"),
        audio_codec=audio.get("codec_name"),
        bit_rate=_num(fmt.get("bit_rate"), int),
        size=_num(fmt.get("size"), int),
    )


def _even(value: float) -> int:
    return max(2, int(round(value / 2)) * 2)


def frame_size(aspect_ratio: str, *, scale: float = 1.0) -> tuple[int, int]:
    """Width and height for a ratio from PROXY_FRAME, scaled and kept even (yuv420p needs it)."""
    try:
        width, height = PROXY_FRAME[aspect_ratio]
    except KeyError:
        raise MediaError(f"unsupported aspect ratio {aspect_ratio!r} (use {list(PROXY_FRAME)})") from None
    return _even(width * scale), _even(height * scale)


def make_proxy(
    src: PathLike, dst: PathLike, aspect_ratio: str, *, height: int | None = None, options: RunOptions | None = None,
    source: MediaInfo | None = None,
) -> MediaInfo:
    """H.264/AAC MP4 (+faststart) at exactly the ratio's frame size, letterboxed, always with audio.

    `height` overrides the table's height (width follows the ratio). A silent AAC track is added
    when the source has none, so players and the HLS step can rely on one audio stream; an AAC
    source track is copied (re-encoding it would cost more CPU than the whole video of a short
    clip and gain nothing). `source`: the caller's probe of `src`, so it is not probed twice.
    """
    options = options or RunOptions()
    info = source or probe(src, options.limits)
    width, out_height = frame_size(aspect_ratio)
    if height:
        width, out_height = frame_size(aspect_ratio, scale=height / out_height)
    source = ffmpeg.input(os.fspath(src), **options.input_options())
    video = (
        source.video.filter("scale", width, out_height, force_original_aspect_ratio="decrease")
        .filter("pad", width, out_height, "(ow-iw)/2", "(oh-ih)/2")
        .filter("setsar", 1)
    )
    # ffmpeg's -shortest cuts a filtered video after its first frame when the audio is copied: the
    # copied track already ends with the source, so it goes without.
    audio_codec: dict[str, Any] = _AAC | {"shortest": None}
    if info.audio_codec == "aac":
        audio, audio_codec = source.audio, {"acodec": "copy"}
    elif info.has_audio:
        audio = source.audio
    else:
        silence = {"t": info.duration_s} if info.duration_s else {}
        audio = ffmpeg.input("anullsrc=r=48000:cl=stereo", f="lavfi", **silence).audio
    with atomic_output(dst) as tmp:
        out = ffmpeg.output(
            video, audio, os.fspath(tmp), f="mp4", movflags="+faststart", **_H264, **audio_codec
        )
        options.run(out, f"proxy of {src}", info)
    return probe(dst, options.limits)


def make_hls(src: PathLike, out_dir: PathLike, *, options: RunOptions | None = None,
             info: MediaInfo | None = None) -> HlsOutput:
    """HLS VOD rendition (index.m3u8 + ~2 s .ts segments); stream copy for H.264/AAC sources.
    `info`: what is already known of `src` (a stored proxy's row), else it is probed."""
    options = options or RunOptions()
    info = info or probe(src, options.limits)
    copy = info.video_codec == "h264" and info.audio_codec in (None, "aac")
    codecs: dict[str, Any] = {"c": "copy"} if copy else _H264_AAC
    out_dir = Path(out_dir)
    with atomic_directory(out_dir) as tmp:
        out = ffmpeg.input(os.fspath(src)).output(
            os.fspath(tmp / HLS_PLAYLIST),
            f="hls",
            hls_time=HLS_SEGMENT_S,
            hls_list_size=0,
            hls_playlist_type="vod",
            hls_segment_filename=os.fspath(tmp / "seg_%04d.ts"),
            **codecs,
        )
        options.run(out, f"HLS of {src}", info)
        names = [
            line.strip()
            for line in (tmp / HLS_PLAYLIST).read_text().splitlines()
            if line.strip() and not line.startswith("#")
        ]
    if not names:
        raise MediaError(f"HLS of {src}: playlist has no segments")
    return HlsOutput(playlist=out_dir / HLS_PLAYLIST, segments=[out_dir / Path(n).name for n in names])


def make_thumbnail(src: PathLike, dst: PathLike, *, options: RunOptions | None = None,
                   info: MediaInfo | None = None) -> Path:
    """JPEG of the frame a third into the video (the first frame when it is under a second), at
    the video's frame size. `info`: what is already known of `src`, else it is probed."""
    options = options or RunOptions()
    info = info or probe(src, options.limits)
    duration = info.duration_s or 0.0
    at = duration / 3 if duration >= 1.0 else 0.0
    with atomic_output(dst) as tmp:
        out = ffmpeg.input(os.fspath(src), ss=f"{at:.3f}").output(
            os.fspath(tmp), f="image2", vcodec="mjpeg", vframes=1, update=1, **{"q:v": 3}
        )
        options.run(out, f"thumbnail of {src}", info)
    return Path(dst)
