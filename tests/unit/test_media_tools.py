"""The media adapter against real ffmpeg on tiny generated inputs."""

from __future__ import annotations

import os
from pathlib import Path

import ffmpeg
import pytest

from adapters.media.ffmpeg_tools import MediaError, ffmpeg_path, ffprobe_path, font_path, run_ffmpeg
from adapters.media.transcode import PROXY_FRAME, frame_size, make_hls, make_proxy, make_thumbnail, probe


def _testsrc(path: Path, *, size: str, seconds: float, audio: bool, codecs: tuple[str, str] = ("mpeg4", "mp2")) -> Path:
    video = ffmpeg.input(f"testsrc2=s={size}:r=25:d={seconds}", f="lavfi").video
    streams = [video]
    if audio:
        streams.append(ffmpeg.input(f"sine=frequency=300:duration={seconds}", f="lavfi").audio)
    run_ffmpeg(ffmpeg.output(*streams, str(path), vcodec=codecs[0], acodec=codecs[1]), "test input")
    return path


def _streams(path: Path) -> dict[str, dict]:
    return {s["codec_type"]: s for s in ffmpeg.probe(str(path), cmd=ffprobe_path(), count_frames=None)["streams"]}


def _top_level_boxes(path: Path) -> list[str]:
    data, boxes, at = path.read_bytes(), [], 0
    while at + 8 <= len(data):
        size = int.from_bytes(data[at : at + 4], "big")
        boxes.append(data[at + 4 : at + 8].decode("latin-1"))
        if size == 1:  # 64-bit size follows the type
            size = int.from_bytes(data[at + 8 : at + 16], "big")
        if size < 8:
            break
        at += size
    return boxes


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("media")
    return {
        "silent_4x3": _testsrc(d / "silent.avi", size="160x120", seconds=3, audio=False),
        "sound_16x9": _testsrc(d / "sound.avi", size="192x108", seconds=3, audio=True),
        "h264_aac": _testsrc(d / "provider.mp4", size="192x108", seconds=3, audio=True, codecs=("libx264", "aac")),
    }


def test_binaries_and_font_are_found() -> None:
    assert os.access(ffmpeg_path(), os.X_OK)
    assert os.access(ffprobe_path(), os.X_OK)
    assert font_path().name == "Roboto-Regular.ttf" and font_path().stat().st_size > 0


def test_probe_reads_streams(sources: dict[str, Path]) -> None:
    info = probe(sources["sound_16x9"])
    assert (info.width, info.height) == (192, 108)
    assert info.video_codec == "mpeg4" and info.audio_codec == "mp2" and info.has_audio
    assert info.duration_s == pytest.approx(3, abs=0.2)
    assert not probe(sources["silent_4x3"]).has_audio


def test_probe_rejects_unreadable_input(tmp_path: Path) -> None:
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"this is not a video" * 10)
    with pytest.raises(MediaError, match="cannot probe"):
        probe(junk)
    with pytest.raises(MediaError, match="no such file"):
        probe(tmp_path / "missing.mp4")


@pytest.mark.parametrize("ratio", list(PROXY_FRAME))
def test_proxy_is_h264_aac_at_the_ratio_size(sources: dict[str, Path], tmp_path: Path, ratio: str) -> None:
    info = make_proxy(sources["silent_4x3"], tmp_path / "proxy.mp4", ratio)
    assert (info.width, info.height) == PROXY_FRAME[ratio]
    assert info.video_codec == "h264"
    assert info.audio_codec == "aac", "a silent AAC track is added when the source has none"
    assert info.duration_s == pytest.approx(3, abs=0.2)
    boxes = _top_level_boxes(tmp_path / "proxy.mp4")
    assert boxes.index("moov") < boxes.index("mdat"), "+faststart puts the index before the media"


def test_proxy_keeps_audio_and_honours_height(sources: dict[str, Path], tmp_path: Path) -> None:
    dst = tmp_path / "proxy.mp4"
    dst.write_bytes(b"stale output from an earlier attempt")
    info = make_proxy(sources["sound_16x9"], dst, "16:9", height=180)
    assert (info.width, info.height) == (320, 180)
    assert info.audio_codec == "aac"
    assert [p.name for p in tmp_path.iterdir()] == ["proxy.mp4"], "no temp files left behind"


def test_proxy_copies_an_aac_track_and_keeps_every_frame(sources: dict[str, Path], tmp_path: Path) -> None:
    """A provider's AAC track is copied, not re-encoded, and the video still has all 75 frames
    (ffmpeg's -shortest with a copied track used to stop the video after its first frame)."""
    src = sources["h264_aac"]
    info = make_proxy(src, tmp_path / "proxy.mp4", "16:9", source=probe(src))
    out, original = _streams(tmp_path / "proxy.mp4"), _streams(src)
    assert int(out["video"]["nb_read_frames"]) == int(original["video"]["nb_read_frames"]) == 75
    assert out["audio"]["codec_name"] == "aac" and out["audio"]["bit_rate"] == original["audio"]["bit_rate"]
    assert info.duration_s == pytest.approx(3, abs=0.1)


def test_unknown_ratio_is_a_media_error() -> None:
    with pytest.raises(MediaError, match="unsupported aspect ratio"):
        frame_size("4:3")


def test_hls_vod_playlist_with_segments(sources: dict[str, Path], tmp_path: Path) -> None:
    proxy = tmp_path / "proxy.mp4"
    make_proxy(sources["sound_16x9"], proxy, "16:9")
    for _ in range(2):  # a rerun replaces the rendition
        hls = make_hls(proxy, tmp_path / "hls")
    text = hls.playlist.read_text()
    assert "#EXT-X-PLAYLIST-TYPE:VOD" in text and "#EXT-X-ENDLIST" in text
    assert len(hls.segments) >= 1 and all(s.stat().st_size > 0 for s in hls.segments)
    assert sorted(p.name for p in (tmp_path / "hls").iterdir()) == sorted(
        ["index.m3u8", *(s.name for s in hls.segments)]
    )
    assert probe(hls.segments[0]).video_codec == "h264"


def test_thumbnail_is_a_jpeg(sources: dict[str, Path], tmp_path: Path) -> None:
    thumb = make_thumbnail(sources["sound_16x9"], tmp_path / "thumb.jpg")
    assert thumb.read_bytes()[:3] == b"\xff\xd8\xff"
    info = probe(thumb)
    assert info.video_codec == "mjpeg" and (info.width, info.height) == (192, 108)
