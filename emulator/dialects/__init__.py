"""Provider wire formats served by the emulator under a prefix (`/runway/v1/...`, ...), each on
the shared job engine (emulator/engine.py) with that provider's auth check and error shapes.

A dialect module has `PREFIX`, `router(engine) -> APIRouter` and `invalid_request(exc)`; errors
it raises as DialectError carry the provider-shaped response.
"""

from __future__ import annotations

from types import ModuleType

from fastapi.responses import JSONResponse

from adapters.providers.emulator_api import ASPECT_RATIOS


class DialectError(Exception):
    """An error answer already in a provider's shape."""

    def __init__(self, response: JSONResponse):
        super().__init__(response.status_code)
        self.response = response


def retry_headers(name: str, seconds: float | None) -> dict[str, str] | None:
    """The provider's own retry header (`Retry-After`, `retry-after-ms`, ...), if there is a hint."""
    if seconds is None:
        return None
    return {name: str(int(seconds * 1000)) if name.endswith("-ms") else f"{seconds:g}"}


def engine_ratio(width_height: str) -> str | None:
    """`720:1280` (pixels) -> `9:16`, when it is one the engine renders."""
    from math import gcd

    try:
        w, h = (int(x) for x in width_height.split(":"))
        g = gcd(w, h)
    except (ValueError, ZeroDivisionError):
        return None
    ratio = f"{w // g}:{h // g}"
    return ratio if ratio in ASPECT_RATIOS else None


def _load() -> dict[str, ModuleType]:
    from emulator.dialects import fal, kling, luma, openai, rekognition, replicate, runway

    return {m.PREFIX: m for m in (runway, replicate, kling, luma, fal, openai, rekognition)}


DIALECTS = _load()


def dialect_for(path: str) -> ModuleType | None:
    return DIALECTS.get(path.strip("/").partition("/")[0])
