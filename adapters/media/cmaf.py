"""CMAF: one set of fMP4 segments that both an HLS playlist and a DASH manifest (`manifest.mpd`) refer to.

ffmpeg's DASH muxer writes the segments, the MPD and, with `hls_playlist`, HLS playlists over the
same files. What it writes as it comes is corrected here:
- HLS media playlists carry wall-clock `EXT-X-PROGRAM-DATE-TIME` (the time of the run) and no
  `EXT-X-PLAYLIST-TYPE`: the dates are removed, `VOD` is added, `EXT-X-ENDLIST` is made sure of,
  and the master playlist declares `EXT-X-INDEPENDENT-SEGMENTS` (every segment opens on a keyframe);
- the init segments lack the `cmfc` brand: the mp4 muxer's `cmaf` movflag adds it to their `ftyp`;
- segments open on keyframes only if the video has one at every `CMAF_SEGMENT_S` boundary;
- the muxer ends an audio segment when the video's keyframe arrives in decode order, so with
  B-frames (decode times behind presentation times by the reorder delay) each audio segment ends
  that delay early (about 75 ms at 25 fps): audio and video segments do not cover the same times.

Segments are `CMAF_SEGMENT_S` = 4 s: a multiple of the proxy's 2-s keyframe interval, short enough
for a quick start and seeks, long enough that a 10-s clip is 3 segments per track, not 10.

The streams are copied when that keeps the set aligned: H.264 video (AAC or no audio) with a
keyframe opening every segment and, when there is audio, no B-frames. Otherwise the video is
encoded again (x264 veryfast) with a fixed GOP: `-g` = ceil(fps x segment), `-sc_threshold 0` (no
keyframes at scene changes), keyframes forced at each boundary (exact at fractional rates such as
30000/1001) and `-bf 0`, so the audio is cut within one AAC frame (21 ms at 48 kHz) of the video.
The pipeline's proxy has B-frames and always audio, so it is encoded again: a small picture, which
costs little (docs/performance.md). A video without audio gives a video-only set.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import ffmpeg
from pydantic import BaseModel

from adapters.media.ffmpeg_tools import MediaError, atomic_directory
from adapters.media.keyframes import keyframes_open_every, read_video_packets
from adapters.media.source_streams import SourceStreams, read_source
from adapters.media.transcode import _AAC, _H264, PathLike, RunOptions

CMAF_SEGMENT_S = 4
MANIFEST = "manifest.mpd"
MASTER_PLAYLIST = "master.m3u8"
_DASH: dict[str, Any] = {
    "f": "dash",
    "seg_duration": CMAF_SEGMENT_S,
    "use_template": 1,
    "use_timeline": 0,
    "hls_playlist": 1,
    "hls_master_name": MASTER_PLAYLIST,
    "format_options": "movflags=+cmaf",  # adds the cmfc brand to each init segment's ftyp
}
_DROPPED_TAGS = ("#EXT-X-PROGRAM-DATE-TIME", "#EXT-X-PLAYLIST-TYPE", "#EXT-X-ENDLIST")


class CmafOutput(BaseModel):
    """The files of one CMAF set (all in one directory) and how it was made."""

    manifest: Path
    master_playlist: Path
    media_playlists: list[Path]
    init_segments: list[Path]
    segments: list[Path]
    copied: bool
    has_audio: bool
    segment_s: int = CMAF_SEGMENT_S


def can_copy(source: SourceStreams, keyframe_times_s: tuple[float, ...]) -> bool:
    """Whether copying the streams keeps segments on keyframes and audio aligned with video."""
    audio_codec = source.info.audio_codec
    if source.info.video_codec != "h264" or audio_codec not in (None, "aac"):
        return False
    if audio_codec and source.reorders_frames:
        return False
    frame_s = float(1 / source.frame_rate)
    return keyframes_open_every(keyframe_times_s, CMAF_SEGMENT_S, source.duration_s, frame_s)


def _codecs(source: SourceStreams, copy: bool) -> dict[str, Any]:
    if copy:
        return {"c": "copy"}
    gop = math.ceil(source.frame_rate * CMAF_SEGMENT_S)
    video = _H264 | {"force_key_frames": f"expr:gte(t,n_forced*{CMAF_SEGMENT_S})", "g": gop,
                     "sc_threshold": 0, "bf": 0}
    audio = {"acodec": "copy"} if source.info.audio_codec == "aac" else _AAC
    return video | audio if source.audio else video


def make_cmaf(src: PathLike, out_dir: PathLike, *, options: RunOptions | None = None) -> CmafOutput:
    """Write the CMAF set of `src` into `out_dir` (replaced whole on success); MediaUnreadable for an
    input without video, MediaError when ffmpeg fails or writes no segment."""
    options = options or RunOptions()
    source = read_source(src, options.limits)
    copy = can_copy(source, read_video_packets(src, options.limits).keyframe_times_s)
    streams = ["v", "a"] if source.audio else ["v"]
    sets = " ".join(f"id={i},streams={kind}" for i, kind in enumerate(streams))
    out_dir = Path(out_dir)
    with atomic_directory(out_dir) as tmp:
        inp = ffmpeg.input(os.fspath(src))
        mapped = [inp.video, inp.audio] if source.audio else [inp.video]
        out = ffmpeg.output(*mapped, os.fspath(tmp / MANIFEST), adaptation_sets=sets, **_DASH,
                            **_codecs(source, copy))
        options.run(out, f"CMAF of {src}", source.info)
        media = sorted(tmp.glob("media_*.m3u8"))
        for playlist in media:
            playlist.write_text(vod_playlist(playlist.read_text()))
        master = tmp / MASTER_PLAYLIST
        master.write_text(independent_segments(master.read_text()))
        segments = [out_dir / name for p in media for name in playlist_segments(p.read_text())]
        inits = sorted(out_dir / p.name for p in tmp.glob("init-*"))
    if not segments:
        raise MediaError(f"CMAF of {src}: the playlists list no segments")
    return CmafOutput(manifest=out_dir / MANIFEST, master_playlist=out_dir / MASTER_PLAYLIST,
                      media_playlists=[out_dir / p.name for p in media], init_segments=inits, segments=segments,
                      copied=copy, has_audio=source.audio is not None)


def vod_playlist(text: str) -> str:
    """An HLS media playlist as a VOD one: no wall-clock dates, `PLAYLIST-TYPE:VOD` after the
    target duration, `ENDLIST` last."""
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith(_DROPPED_TAGS)]
    at = next((i + 1 for i, line in enumerate(lines) if line.startswith("#EXT-X-TARGETDURATION")), 1)
    lines.insert(at, "#EXT-X-PLAYLIST-TYPE:VOD")
    return "\n".join([*lines, "#EXT-X-ENDLIST"]) + "\n"


def independent_segments(master: str) -> str:
    """The master playlist with `EXT-X-INDEPENDENT-SEGMENTS` after its header (once)."""
    lines = [line for line in master.splitlines() if line.strip()]
    if "#EXT-X-INDEPENDENT-SEGMENTS" not in lines:
        at = next((i + 1 for i, line in enumerate(lines) if line.startswith("#EXT-X-VERSION")), 1)
        lines.insert(at, "#EXT-X-INDEPENDENT-SEGMENTS")
    return "\n".join(lines) + "\n"


def playlist_segments(text: str) -> list[str]:
    """The segment URIs of an HLS media playlist, in order."""
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
