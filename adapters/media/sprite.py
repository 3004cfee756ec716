"""A thumbnail sprite (one JPEG of tiles) and the WebVTT that maps each stretch of the video to its
tile as `sprite.jpg#xywh=x,y,w,h`: what scrubbing previews read (video.js thumbnail plugins, the
storyboard form Mux serves).

The rule, from the duration D:
- one tile every N seconds, N = 1 up to 60 s and ceil(D / 60) beyond, so a sprite holds at most
  60 tiles (the longest input the media caps allow, 120 s, gives one every 2 s);
- tiles = ceil(D / N), at least 1 (a 1-s clip gets one tile), laid out in rows of at most 10;
- a tile's longer side is 160 px, the other follows the video's aspect (even), so a 16:9 sprite of
  60 tiles is 1600 x 540.
Tile k shows the first frame at or after k x N (ffmpeg `select`, then `scale` and `tile`), and its
cue runs from k x N to the next tile's start, the last to the end of the video: the cues are
contiguous and cover the duration.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import ffmpeg
from pydantic import BaseModel

from adapters.media.ffmpeg_tools import MediaError, atomic_output
from adapters.media.source_streams import read_source
from adapters.media.transcode import PathLike, RunOptions

MAX_TILES = 60
MAX_COLUMNS = 10
TILE_LONG_SIDE = 160


class SpriteLayout(BaseModel):
    """How a sprite is cut: one tile every `interval_s`, `tiles` of them in `columns` x `rows`."""

    interval_s: int
    tiles: int
    columns: int
    rows: int
    tile_width: int
    tile_height: int

    @property
    def width(self) -> int:
        return self.columns * self.tile_width

    @property
    def height(self) -> int:
        return self.rows * self.tile_height

    def tile_box(self, index: int) -> tuple[int, int, int, int]:
        """x, y, w, h of tile `index` in the sprite."""
        row, column = divmod(index, self.columns)
        return column * self.tile_width, row * self.tile_height, self.tile_width, self.tile_height


class SpriteOutput(BaseModel):
    sprite: Path
    vtt: Path
    layout: SpriteLayout


def sprite_layout(duration_s: float, width: int, height: int) -> SpriteLayout:
    """The layout the module's rule gives a video of `duration_s` and `width` x `height`."""
    interval = 1 if duration_s <= MAX_TILES else math.ceil(duration_s / MAX_TILES)
    tiles = max(1, math.ceil(round(duration_s, 3) / interval))
    columns = min(tiles, MAX_COLUMNS)
    scale = TILE_LONG_SIDE / max(width, height, 1)
    tile_w, tile_h = (max(2, round(side * scale / 2) * 2) for side in (width, height))
    return SpriteLayout(interval_s=interval, tiles=tiles, columns=columns, rows=math.ceil(tiles / columns),
                        tile_width=tile_w, tile_height=tile_h)


def sprite_vtt(layout: SpriteLayout, duration_s: float, sprite_name: str) -> str:
    """WebVTT with one cue per tile, pointing at its box in `sprite_name`."""
    lines = ["WEBVTT", ""]
    for index in range(layout.tiles):
        start = index * layout.interval_s
        end = duration_s if index == layout.tiles - 1 else (index + 1) * layout.interval_s
        x, y, w, h = layout.tile_box(index)
        lines += [f"{_timestamp(start)} --> {_timestamp(end)}", f"{sprite_name}#xywh={x},{y},{w},{h}", ""]
    return "\n".join(lines)


def _timestamp(seconds: float) -> str:
    millis = round(seconds * 1000)
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    return f"{hours:02d}:{minutes:02d}:{rest // 1000:02d}.{rest % 1000:03d}"


def make_sprite(src: PathLike, sprite_dst: PathLike, vtt_dst: PathLike, *,
                options: RunOptions | None = None) -> SpriteOutput:
    """Write the sprite JPEG and its WebVTT (each replaced only on success; the VTT names the sprite
    by its file name, so both are served from one folder). MediaUnreadable for an input without
    video, MediaError when ffmpeg fails."""
    options = options or RunOptions()
    source = read_source(src, options.limits)
    duration = source.duration_s
    if duration <= 0:
        raise MediaError(f"sprite of {src}: unknown duration")
    layout = sprite_layout(duration, source.info.width or 0, source.info.height or 0)
    with atomic_output(sprite_dst) as tmp_sprite, atomic_output(vtt_dst) as tmp_vtt:
        video = (ffmpeg.input(os.fspath(src)).video
                 .filter("select", f"gte(t,selected_n*{layout.interval_s})")
                 .filter("scale", layout.tile_width, layout.tile_height)
                 .filter("tile", f"{layout.columns}x{layout.rows}"))
        out = video.output(os.fspath(tmp_sprite), f="image2", vcodec="mjpeg", vframes=1, update=1,
                           **{"q:v": 4, "fps_mode": "passthrough"})
        options.run(out, f"sprite of {src}", source.info)
        tmp_vtt.write_text(sprite_vtt(layout, duration, Path(sprite_dst).name))
    return SpriteOutput(sprite=Path(sprite_dst), vtt=Path(vtt_dst), layout=layout)
