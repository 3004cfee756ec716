"""Render a job for real: fetch the product image, then ffmpeg a zoom/pan clip with text.

The output is a genuine H.264/AAC MP4 at the requested ratio and duration, so everything
downstream (fetch, probe, transcode, review) works on real media. Mode "fast" renders the same
clip tiny and at a low frame rate, for load tests where only the pipeline around it matters.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

import ffmpeg
import httpx

from adapters.media.ffmpeg_tools import MediaError, atomic_output, font_path, run_ffmpeg
from adapters.media.transcode import frame_size, probe
from emulator.config import RenderMode

FPS = 24
RENDER_SCALE = 1.5  # x the proxy frame: 9:16 -> 540x960, 16:9 -> 960x540, 1:1 -> 720x720
FAST_FPS = 10
FAST_SHORT_SIDE = 180  # 9:16 -> 180x320, 16:9 -> 320x180, 1:1 -> 180x180
ZOOM_END = 1.25
BACKGROUND = "0x1d2b53"


@dataclass(frozen=True)
class RenderProfile:
    """What a render mode sets: frame, frame rate and encoder effort."""

    width: int
    height: int
    fps: int
    preset: str
    crf: int | None  # None: x264's default
    audio_bitrate: str


def fast_frame_size(aspect_ratio: str, short_side: int = FAST_SHORT_SIDE) -> tuple[int, int]:
    """The ratio's frame scaled so its short side is `short_side` (even, ratio kept exactly)."""
    width, height = frame_size(aspect_ratio)
    scale = short_side / min(width, height)
    return round(width * scale), round(height * scale)


def render_profile(aspect_ratio: str, mode: RenderMode) -> RenderProfile:
    if mode == "fast":
        width, height = fast_frame_size(aspect_ratio)
        return RenderProfile(width, height, FAST_FPS, preset="ultrafast", crf=35, audio_bitrate="32k")
    width, height = frame_size(aspect_ratio, scale=RENDER_SCALE)
    return RenderProfile(width, height, FPS, preset="veryfast", crf=None, audio_bitrate="64k")


class RenderError(Exception):
    """A job failure with the provider-style code the API reports."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def fetch_image(url: str, dst: Path, *, timeout_s: float, max_bytes: int) -> Path:
    """Download the input image; any failure is the caller's input problem, not ours."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        with httpx.stream("GET", url, timeout=timeout_s, follow_redirects=True) as resp:
            resp.raise_for_status()
            size = 0
            with dst.open("wb") as out:
                for chunk in resp.iter_bytes():
                    size += len(chunk)
                    if size > max_bytes:
                        raise RenderError("INPUT.IMAGE_TOO_LARGE", f"image over {max_bytes} bytes")
                    out.write(chunk)
    except httpx.HTTPError as exc:
        raise RenderError("INPUT.IMAGE_UNREACHABLE", f"cannot fetch image: {exc}") from exc
    try:
        info = probe(dst)
    except MediaError as exc:
        raise RenderError("INPUT.IMAGE_INVALID", "input is not a readable image") from exc
    if not info.width:
        raise RenderError("INPUT.IMAGE_INVALID", "input has no picture")
    return dst


def _background(image: Path | None, width: int, height: int, fps: int, frames: int):
    """Slow zoom with a left-to-right drift over the image (cropped to fill), or a plain colour."""
    if image is None:
        return ffmpeg.input(f"color=c={BACKGROUND}:s={width}x{height}:r={fps}", f="lavfi").video
    step = (ZOOM_END - 1.0) / max(frames, 1)
    big_w, big_h = int(width * RENDER_SCALE) // 2 * 2, int(height * RENDER_SCALE) // 2 * 2
    return (
        ffmpeg.input(str(image))
        .video.filter("scale", big_w, big_h, force_original_aspect_ratio="increase")
        .filter("crop", big_w, big_h)
        .filter(
            "zoompan",
            z=f"min(zoom+{step:.6f},{ZOOM_END})",
            x=f"(iw-iw/zoom)*on/{frames}",
            y="(ih-ih/zoom)/2",
            d=frames,
            s=f"{width}x{height}",
            fps=fps,
        )
    )


def _defective(defect: str, image: Path | None, prof: RenderProfile, frames: int):
    """The clip a `{defect}_video` fault asks for: all black (no text either), or the first frame of
    the normal clip held for the whole duration (a frozen picture)."""
    if defect == "black":
        return ffmpeg.input(f"color=c=black:s={prof.width}x{prof.height}:r={prof.fps}", f="lavfi").video
    still = _background(image, prof.width, prof.height, prof.fps, frames).filter("trim", end_frame=1)
    return still.filter("loop", loop=frames, size=1).filter("setpts", "N/FRAME_RATE/TB")


def _overlay(video, lines: list[str], work_dir: Path, width: int, height: int):
    """One drawtext per line from a text file (no escaping of user text), wrapped to the frame
    width and stacked as a block that ends just above the bottom edge."""
    size = max(12, height // 22)
    row_h = int(size * 1.45)
    gap = size // 2
    chars = max(8, int(width / (size * 0.55)))
    blocks = [textwrap.wrap(line.strip(), chars) for line in lines if line.strip()]
    top = int(height * 0.95) - sum(row_h * len(rows) + gap for rows in blocks)
    for i, rows in enumerate(blocks):
        textfile = work_dir / f"line{i}.txt"
        textfile.write_text("\n".join(rows), encoding="utf-8")
        video = video.drawtext(
            x="(w-text_w)/2",
            y=max(top, 0),
            escape_text=False,
            fontfile=str(font_path()),
            textfile=str(textfile),
            expansion="none",
            fontsize=size,
            fontcolor="white",
            line_spacing=int(size * 0.3),
            box=1,
            boxcolor="black@0.55",
            boxborderw=max(4, size // 4),
        )
        top += row_h * len(rows) + gap
    return video


def render_video(
    dst: Path,
    *,
    image: Path | None,
    aspect_ratio: str,
    duration_s: float,
    overlay_lines: list[str],
    work_dir: Path,
    mode: RenderMode = "full",
    defect: str | None = None,
) -> Path:
    """Write the job's MP4 to `dst` (atomically): H.264 + a quiet AAC sine tone, framed by `mode`.

    `work_dir` (the caller's, existing) receives the drawtext text files. `defect` ("black",
    "frozen") renders an injected bad clip instead."""
    prof = render_profile(aspect_ratio, mode)
    frames = max(1, round(duration_s * prof.fps))
    if defect == "black":
        video = _defective(defect, image, prof, frames)
    else:
        background = (_defective(defect, image, prof, frames) if defect
                      else _background(image, prof.width, prof.height, prof.fps, frames))
        video = _overlay(background, overlay_lines, work_dir, prof.width, prof.height)
    tone = ffmpeg.input(f"sine=frequency=440:sample_rate=48000:duration={duration_s}", f="lavfi").audio
    audio = tone.filter("volume", 0.05)
    quality = {} if prof.crf is None else {"crf": prof.crf}
    try:
        with atomic_output(dst) as tmp:
            out = ffmpeg.output(
                video,
                audio,
                str(tmp),
                f="mp4",
                t=duration_s,
                r=prof.fps,
                vcodec="libx264",
                preset=prof.preset,
                pix_fmt="yuv420p",
                acodec="aac",
                audio_bitrate=prof.audio_bitrate,
                movflags="+faststart",
                **quality,
            )
            run_ffmpeg(out, f"render {dst.name}")
    except MediaError as exc:
        raise RenderError("INTERNAL.RENDER_FAILED", str(exc)) from exc
    return dst
