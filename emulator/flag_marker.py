"""The emulator's flag marker: a pixel pattern that its moderation dialect flags in an image, so
tests flag an image (or, once the renderer draws it, a video frame) without any offensive content.

The marker: a square in the top-left corner, side max(16, shorter side // 8) pixels, cut into a
2x2 checker: magenta (255, 0, 255) top-left and bottom-right, green (0, 255, 0) top-right and
bottom-left. Blocks of 8 pixels or more survive JPEG and H.264 (chroma at half resolution), and a
product photo does not carry it by chance. Found when the inner half of each quarter averages
within TOLERANCE of its colour on every channel. An ffmpeg filter draws the same with four
`drawbox` filters (`marker_drawboxes`).
"""

from __future__ import annotations

from io import BytesIO

from PIL import Image, ImageDraw, ImageStat

from catalog.images import MAX_IMAGE_PIXELS

MAGENTA = (255, 0, 255)
GREEN = (0, 255, 0)
TOLERANCE = 48
MIN_SIDE = 16


def marker_side(width: int, height: int) -> int:
    return max(MIN_SIDE, min(width, height) // 8) // 2 * 2


def _quarters(side: int) -> list[tuple[tuple[int, int, int, int], tuple[int, int, int]]]:
    half = side // 2
    return [((0, 0, half, half), MAGENTA), ((half, 0, side, half), GREEN),
            ((0, half, half, side), GREEN), ((half, half, side, side), MAGENTA)]


def draw_marker(image: Image.Image) -> Image.Image:
    """A copy of `image` (RGB) carrying the marker."""
    marked = image.convert("RGB")
    pen = ImageDraw.Draw(marked)
    for (x0, y0, x1, y1), colour in _quarters(marker_side(*marked.size)):
        pen.rectangle((x0, y0, x1 - 1, y1 - 1), fill=colour)
    return marked


def marker_drawboxes(width: int, height: int) -> list[str]:
    """The marker as ffmpeg `drawbox` filters for a `width` x `height` frame."""
    return [f"drawbox=x={x0}:y={y0}:w={x1 - x0}:h={y1 - y0}:color=0x{r:02x}{g:02x}{b:02x}:t=fill"
            for (x0, y0, x1, y1), (r, g, b) in _quarters(marker_side(width, height))]


def carries_marker(image: Image.Image) -> bool:
    rgb = image.convert("RGB")
    side = marker_side(*rgb.size)
    if side > min(rgb.size):
        return False
    for (x0, y0, x1, y1), colour in _quarters(side):
        inset = (x1 - x0) // 4
        mean = ImageStat.Stat(rgb.crop((x0 + inset, y0 + inset, x1 - inset, y1 - inset))).mean
        if any(abs(m - c) > TOLERANCE for m, c in zip(mean, colour, strict=True)):
            return False
    return True


class UnreadableImage(ValueError):
    """Bytes that are not an image we decode (or one over the pixel cap: a bomb is not decoded)."""


def image_carries_marker(data: bytes) -> bool:
    """Whether encoded image bytes carry the marker; UnreadableImage when they are no image."""
    try:
        with Image.open(BytesIO(data)) as image:
            width, height = image.size
            if width * height > MAX_IMAGE_PIXELS:
                raise UnreadableImage(f"{width}x{height}: over {MAX_IMAGE_PIXELS} pixels")
            image.load()
            return carries_marker(image)
    except (OSError, SyntaxError, Image.DecompressionBombError) as exc:
        raise UnreadableImage(str(exc)[:200]) from None


def sample_png(width: int = 64, height: int = 64, *, marked: bool,
               background: tuple[int, int, int] = (200, 200, 200)) -> bytes:
    """A plain PNG, with the marker or without (for tests and demos)."""
    image = Image.new("RGB", (width, height), background)
    out = BytesIO()
    (draw_marker(image) if marked else image).save(out, "PNG")
    return out.getvalue()
