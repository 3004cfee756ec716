"""Bounded streaming decoding of an HTTP body (the fetcher never lets httpx decode).

httpx decodes any `Content-Encoding` a server answers, stacked encodings included, and decodes a
whole network read at once before anyone can count the output: a 660-byte gzip bomb against a
1 MiB cap allocated 900 MiB. Here the raw bytes are fed to zlib with `max_length`, so at most one
output chunk exists at a time and every decoded byte is counted against the cap before it is
kept. Only `identity`, one `gzip` or one `deflate` layer is accepted: a stacked encoding
(`gzip, gzip`) or an unknown one (br, zstd) is refused.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator

_GZIP_WBITS = 16 + zlib.MAX_WBITS
_ZLIB_WBITS = zlib.MAX_WBITS
_RAW_DEFLATE_WBITS = -zlib.MAX_WBITS


class EncodingRefused(Exception):
    """The body's encoding is not one we decode (stacked or unknown)."""


class BodyTooLarge(Exception):
    """More decoded (or raw) bytes than the cap; raised before the extra bytes are kept."""


class BodyUndecodable(Exception):
    """The bytes are not valid for the encoding the server announced."""


def content_codings(header: str | None) -> list[str]:
    """The Content-Encoding layers, outermost last, without `identity`; refuses what we cannot decode."""
    codings = [c.strip().lower() for c in (header or "").split(",") if c.strip()]
    codings = [c for c in codings if c != "identity"]
    unknown = [c for c in codings if c not in ("gzip", "x-gzip", "deflate")]
    if unknown:
        raise EncodingRefused(f"unsupported Content-Encoding {', '.join(unknown)}")
    if len(codings) > 1:
        raise EncodingRefused(f"stacked Content-Encoding {', '.join(codings)} refused")
    return codings


def decoded_chunks(raw: Iterable[bytes], coding: str | None, *, max_bytes: int, chunk: int) -> Iterator[bytes]:
    """Decode `raw` (one coding or None) into chunks of at most `chunk` bytes; BodyTooLarge past
    `max_bytes` of raw or decoded output. Memory: one raw chunk and one output chunk at a time."""
    decoder = _Decoder(coding, chunk) if coding else None
    raw_total = decoded_total = 0
    for data in raw:
        raw_total += len(data)
        if raw_total > max_bytes:
            raise BodyTooLarge(f"body exceeds {max_bytes} bytes")
        for out in decoder.feed(data) if decoder else (data,):
            decoded_total += len(out)
            if decoded_total > max_bytes:
                raise BodyTooLarge(f"decoded body exceeds {max_bytes} bytes")
            if out:
                yield out
    if decoder is not None:
        decoder.finish()


class _Decoder:
    """One gzip or deflate layer; gzip members may follow one another (RFC 1952)."""

    def __init__(self, coding: str, chunk: int) -> None:
        self._gzip = coding in ("gzip", "x-gzip")
        self._chunk = chunk
        self._started = False
        self._obj = zlib.decompressobj(_GZIP_WBITS if self._gzip else _ZLIB_WBITS)

    def feed(self, data: bytes) -> Iterator[bytes]:
        while True:
            if self._obj.eof:
                if not data:
                    return
                self._next_member()
            try:
                out = self._obj.decompress(data, self._chunk)
            except zlib.error as exc:
                if not self._gzip and not self._started:  # "deflate" sent as raw deflate (common)
                    self._obj = zlib.decompressobj(_RAW_DEFLATE_WBITS)
                    self._started = True
                    continue
                raise BodyUndecodable(f"invalid {'gzip' if self._gzip else 'deflate'} data: {exc}") from exc
            self._started = True
            data = self._obj.unused_data if self._obj.eof else self._obj.unconsumed_tail
            if out:
                yield out
            if not data and len(out) < self._chunk:  # a full chunk may leave output pending: drain it
                return

    def _next_member(self) -> None:
        if not self._gzip:
            raise BodyUndecodable("data after the end of the deflate stream")
        self._obj = zlib.decompressobj(_GZIP_WBITS)

    def finish(self) -> None:
        if not self._obj.eof:
            raise BodyUndecodable("truncated compressed body")
