"""Fixtures every test layer may use."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import pytest


def _png_bomb(width: int = 20_000, height: int = 20_000) -> bytes:
    """A valid 1-bit PNG of width x height zero pixels: about 50 KB on disk, 400 MP when decoded."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    row = b"\0" * (1 + (width + 7) // 8)
    packer = zlib.compressobj(9)
    idat = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


@pytest.fixture(scope="session")
def png_bomb() -> Callable[..., bytes]:
    """Makes decompression-bomb PNGs: `png_bomb()` is 20,000 x 20,000, `png_bomb(w, h)` any size."""
    return _png_bomb
