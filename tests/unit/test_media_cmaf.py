"""CMAF packaging against real ffmpeg: one set of fMP4 segments under a DASH manifest and HLS playlists."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from media_clips import make_clip

from adapters.media.cmaf import (
    CMAF_SEGMENT_S,
    CmafOutput,
    independent_segments,
    make_cmaf,
    playlist_segments,
    vod_playlist,
)
from adapters.media.ffmpeg_tools import probe_json

MPD_NS = {"mpd": "urn:mpeg:dash:schema:mpd:2011"}
AAC_FRAME_S = 1024 / 48000


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("cmaf")
    return {
        # x264's defaults: B-frames and a keyframe only at 0, so the set must be encoded again
        "provider": make_clip(d / "provider.mp4", seconds=9),
        # no B-frames and a keyframe every 2 s: aligned as it is, so copied
        "aligned": make_clip(d / "aligned.mp4", seconds=9, bf=0, force_key_frames="expr:gte(t,n_forced*2)"),
        "silent_video": make_clip(d / "video_only.mp4", seconds=5, audio=None),
    }


@pytest.fixture(scope="module")
def packaged(clips: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, CmafOutput]:
    d = tmp_path_factory.mktemp("cmaf-out")
    return {name: make_cmaf(path, d / name) for name, path in clips.items()}


def _first_packets(init: Path, segment: Path, tmp_path: Path) -> list[dict]:
    joined = tmp_path / f"{segment.stem}.mp4"
    joined.write_bytes(init.read_bytes() + segment.read_bytes())
    show = ("-show_entries", "packet=pts_time,flags")
    return probe_json(joined, show=show)["packets"]


def _tracks(out: CmafOutput) -> dict[str, list[Path]]:
    """Segment paths per media playlist (media_0: video, media_1: audio), in playlist order."""
    return {p.stem: [p.parent / n for n in playlist_segments(p.read_text())] for p in out.media_playlists}


def test_the_mpd_has_a_video_and_an_audio_set_over_one_segment_template(packaged: dict[str, CmafOutput]) -> None:
    out = packaged["provider"]
    root = ET.parse(out.manifest).getroot()
    assert root.get("type") == "static"
    sets = root.findall("mpd:Period/mpd:AdaptationSet", MPD_NS)
    assert [s.get("contentType") for s in sets] == ["video", "audio"]
    for adaptation in sets:
        representation = adaptation.find("mpd:Representation", MPD_NS)
        template = representation.find("mpd:SegmentTemplate", MPD_NS)
        assert int(template.get("duration")) == CMAF_SEGMENT_S * int(template.get("timescale"))
        rep_id, start = representation.get("id"), int(template.get("startNumber"))
        init = template.get("initialization").replace("$RepresentationID$", rep_id)
        assert (out.manifest.parent / init).is_file()
        first = template.get("media").replace("$RepresentationID$", rep_id).replace("$Number%05d$", f"{start:05d}")
        assert out.manifest.parent / first in out.segments, "HLS and DASH refer to the same segment files"


def test_hls_media_playlists_are_vod_with_an_init_map_and_no_wall_clock(packaged: dict[str, CmafOutput]) -> None:
    for out in packaged.values():
        master = out.master_playlist.read_text()
        assert "#EXT-X-INDEPENDENT-SEGMENTS" in master
        for playlist in out.media_playlists:
            lines = playlist.read_text().splitlines()
            assert playlist.name in master
            assert any(line.startswith("#EXT-X-MAP:URI=") for line in lines)
            assert lines.count("#EXT-X-PLAYLIST-TYPE:VOD") == 1
            assert not any("PROGRAM-DATE-TIME" in line for line in lines)
            assert lines[-1] == "#EXT-X-ENDLIST"


@pytest.mark.parametrize("name", ["provider", "aligned"])
def test_every_video_segment_opens_on_a_keyframe_at_a_segment_boundary(
    packaged: dict[str, CmafOutput], tmp_path: Path, name: str,
) -> None:
    out = packaged[name]
    video = _tracks(out)["media_0"]
    assert len(video) == 3, "9 s in 4-s segments"
    for number, segment in enumerate(video):
        first = _first_packets(out.init_segments[0], segment, tmp_path)[0]
        assert "K" in first["flags"]
        assert float(first["pts_time"]) == pytest.approx(number * CMAF_SEGMENT_S, abs=0.001)


@pytest.mark.parametrize("name", ["provider", "aligned"])
def test_audio_segments_start_within_one_aac_frame_of_the_video_ones(
    packaged: dict[str, CmafOutput], tmp_path: Path, name: str,
) -> None:
    out = packaged[name]
    tracks = _tracks(out)
    assert len(tracks["media_0"]) == len(tracks["media_1"])
    for video, audio in zip(tracks["media_0"], tracks["media_1"], strict=True):
        video_start = float(_first_packets(out.init_segments[0], video, tmp_path)[0]["pts_time"])
        audio_start = float(_first_packets(out.init_segments[1], audio, tmp_path)[0]["pts_time"])
        assert abs(audio_start - video_start) <= AAC_FRAME_S + 0.001


def test_init_segments_carry_the_cmfc_brand(packaged: dict[str, CmafOutput]) -> None:
    for out in packaged.values():
        for init in out.init_segments:
            head = init.read_bytes()
            size = int.from_bytes(head[:4], "big")
            assert head[4:8] == b"ftyp"
            brands = [head[i:i + 4] for i in range(16, size, 4)]
            assert b"cmfc" in brands


def test_streams_are_copied_only_when_that_keeps_the_set_aligned(packaged: dict[str, CmafOutput]) -> None:
    assert not packaged["provider"].copied
    assert packaged["aligned"].copied


def test_a_video_without_audio_gives_a_video_only_set(packaged: dict[str, CmafOutput]) -> None:
    out = packaged["silent_video"]
    assert not out.has_audio and len(out.media_playlists) == 1 and len(out.init_segments) == 1
    sets = ET.parse(out.manifest).getroot().findall("mpd:Period/mpd:AdaptationSet", MPD_NS)
    assert [s.get("contentType") for s in sets] == ["video"]
    assert "TYPE=AUDIO" not in out.master_playlist.read_text()


def test_playlist_fixes_as_text() -> None:
    raw = ("#EXTM3U\n#EXT-X-VERSION:6\n#EXT-X-TARGETDURATION:4\n#EXT-X-MAP:URI=\"init.m4s\"\n#EXTINF:4.0,\n"
           "#EXT-X-PROGRAM-DATE-TIME:2026-01-01T00:00:00.000+0000\nseg-1.m4s\n")
    fixed = vod_playlist(raw).splitlines()
    assert fixed[:4] == ["#EXTM3U", "#EXT-X-VERSION:6", "#EXT-X-TARGETDURATION:4", "#EXT-X-PLAYLIST-TYPE:VOD"]
    assert fixed[-1] == "#EXT-X-ENDLIST" and fixed.count("#EXT-X-ENDLIST") == 1
    assert vod_playlist("\n".join(fixed)) == "\n".join(fixed) + "\n", "fixing twice changes nothing"
    master = independent_segments(independent_segments("#EXTM3U\n#EXT-X-VERSION:7\nmedia_0.m3u8\n"))
    assert master.count("#EXT-X-INDEPENDENT-SEGMENTS") == 1
