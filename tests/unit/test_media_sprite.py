"""The thumbnail sprite and its WebVTT: the layout rule, and real sprites whose cues point inside them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from media_clips import make_clip

from adapters.media.sprite import make_sprite, sprite_layout
from adapters.media.transcode import probe

_CUE = re.compile(r"^(\d\d):(\d\d):(\d\d)\.(\d{3}) --> (\d\d):(\d\d):(\d\d)\.(\d{3})$")
_TARGET = re.compile(r"^(?P<name>[^#]+)#xywh=(\d+),(\d+),(\d+),(\d+)$")


def _cues(vtt: str) -> list[tuple[float, float, str, tuple[int, ...]]]:
    lines = vtt.splitlines()
    assert lines[0] == "WEBVTT"
    cues = []
    for timing, target in zip(lines, lines[1:], strict=False):
        if (m := _CUE.match(timing)) is None:
            continue
        h1, m1, s1, ms1, h2, m2, s2, ms2 = (int(g) for g in m.groups())
        t = _TARGET.match(target)
        assert t is not None, target
        cues.append((h1 * 3600 + m1 * 60 + s1 + ms1 / 1000, h2 * 3600 + m2 * 60 + s2 + ms2 / 1000, t["name"],
                     tuple(int(g) for g in t.groups()[1:])))
    return cues


@pytest.mark.parametrize(("duration", "interval", "tiles", "grid"), [
    (1.0, 1, 1, (1, 1)), (0.4, 1, 1, (1, 1)), (10.0, 1, 10, (10, 1)), (10.5, 1, 11, (10, 2)),
    (60.0, 1, 60, (10, 6)), (61.0, 2, 31, (10, 4)), (120.0, 2, 60, (10, 6)),
])
def test_the_layout_rule(duration: float, interval: int, tiles: int, grid: tuple[int, int]) -> None:
    layout = sprite_layout(duration, 1920, 1080)
    assert (layout.interval_s, layout.tiles, (layout.columns, layout.rows)) == (interval, tiles, grid)
    assert (layout.tile_width, layout.tile_height) == (160, 90)
    portrait = sprite_layout(duration, 1080, 1920)
    assert (portrait.tile_width, portrait.tile_height) == (90, 160)


@pytest.mark.parametrize(("seconds", "size"), [(1, "192x108"), (3.4, "160x120"), (12, "96x160")])
def test_cues_are_contiguous_cover_the_duration_and_point_inside_the_sprite(
    tmp_path: Path, seconds: float, size: str,
) -> None:
    clip = make_clip(tmp_path / "clip.mp4", seconds=seconds, size=size, audio=None)
    out = make_sprite(clip, tmp_path / "out" / "sprite.jpg", tmp_path / "out" / "sprite.vtt")
    sprite = probe(out.sprite)
    assert (sprite.width, sprite.height) == (out.layout.width, out.layout.height)
    cues = _cues(out.vtt.read_text())
    assert len(cues) == out.layout.tiles >= 1
    assert cues[0][0] == 0.0
    assert all(prev[1] == nxt[0] for prev, nxt in zip(cues, cues[1:], strict=False))
    assert cues[-1][1] == pytest.approx(probe(clip).duration_s, abs=0.001)
    for start, end, name, (x, y, w, h) in cues:
        assert start < end and name == "sprite.jpg"
        assert x >= 0 and y >= 0 and x + w <= sprite.width and y + h <= sprite.height
