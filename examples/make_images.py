"""Make the example catalog's product images with ffmpeg (run once; the PNGs are committed).

`python -m examples.make_images` rewrites examples/images/*.png: a colour field, a simple shape
and the product name, so the demo needs no downloaded pictures.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from adapters.media.ffmpeg_tools import ffmpeg_path, font_path

HERE = Path(__file__).resolve().parent
PRODUCTS = {
    "aurora-lamp": ("Aurora Desk Lamp", "0x1f3b73", "0xf2c14e"),
    "trail-runner": ("Trail Runner", "0x2d6a4f", "0xf4f1de"),
    "pour-over-set": ("Pour-Over Set", "0x6d4c41", "0xffe0b2"),
    "merino-scarf": ("Merino Scarf", "0x7b2cbf", "0xe0aaff"),
}


def make(slug: str, name: str, background: str, accent: str) -> Path:
    out = HERE / "images" / f"{slug}.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    text = name.replace(":", r"\:")
    graph = (
        f"drawbox=x=160:y=120:w=320:h=320:color={accent}@0.9:t=fill,"
        f"drawbox=x=200:y=160:w=240:h=240:color={background}@0.6:t=12,"
        f"drawtext=fontfile={font_path()}:text='{text}':fontcolor=white:fontsize=44:"
        "x=(w-text_w)/2:y=500"
    )
    subprocess.run(
        [ffmpeg_path(), "-y", "-loglevel", "error", "-f", "lavfi", "-i", f"color=c={background}:s=640x640",
         "-vf", graph, "-frames:v", "1", "-bitexact", str(out)],
        check=True,
    )
    return out


if __name__ == "__main__":
    for slug, (name, bg, accent) in PRODUCTS.items():
        print(make(slug, name, bg, accent))
