"""The provider-output fetcher against a hostile real server (uvicorn on 127.0.0.1).

Decompression bombs and stacked encodings are refused with the memory growth of this process
measured (tracemalloc, the server thread included) under twice the cap; content-type lies, slow
drips, oversize bodies and redirects to private addresses are refused; plain http only for a
configured host. Self-contained: no embedded stack, no internet.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import random
import socket
import time
import tracemalloc
import zlib
from collections.abc import Iterator

import pytest
from asgi_server import serving

from adapters.fetcher import MP4_BODY, BodyRejected, FetchFailed, FetchRefused, SafeFetcher

CAP = 4 * 1024 * 1024
MP4 = b"\x00\x00\x00\x18ftypmp42\x00\x00\x00\x00mp42isom" + random.Random(5).randbytes(600_000)


def _bomb(decoded: int) -> bytes:
    """gzip of an MP4 header and `decoded` zero bytes, made in pieces (about 1000:1): the magic
    number passes, so only the decoded-byte count can stop it."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(1024 * 1024)
    parts = [packer.compress(MP4[:24])] + [packer.compress(zeros) for _ in range(decoded // len(zeros))]
    return b"".join(parts) + packer.flush()


BOMB = _bomb(256 * 1024 * 1024)  # 256 MiB decoded, ~250 KB on the wire
STACKED = gzip.compress(gzip.compress(bytes(32 * 1024 * 1024)))


def resolver(host: str, port: int) -> list[str]:
    if host.endswith(".test"):
        return ["127.0.0.1"]
    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


async def _send(send, status: int, headers: dict[str, str], body: bytes, *, pieces: int = 1, pause: float = 0) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(k.encode(), v.encode()) for k, v in headers.items()]})
    step = max(1, -(-len(body) // pieces))
    for start in range(0, len(body), step):
        await send({"type": "http.response.body", "body": body[start:start + step], "more_body": True})
        if pause:
            await asyncio.sleep(pause)
    await send({"type": "http.response.body", "body": b""})


async def app(scope: dict, receive: object, send) -> None:
    path = scope["path"]
    if path == "/ok":
        await _send(send, 200, {"content-type": "video/mp4"}, MP4, pieces=7)
    elif path == "/ok-gzip":  # one layer is decoded (bounded) and hashed as decoded bytes
        await _send(send, 200, {"content-type": "video/mp4", "content-encoding": "gzip"}, gzip.compress(MP4))
    elif path == "/bomb":
        await _send(send, 200, {"content-type": "video/mp4", "content-encoding": "gzip"}, BOMB, pieces=4)
    elif path == "/stacked":
        await _send(send, 200, {"content-type": "video/mp4", "content-encoding": "gzip, gzip"}, STACKED)
    elif path == "/lie":  # says MP4, is a web page
        await _send(send, 200, {"content-type": "video/mp4"}, b"<!doctype html><html>" + bytes(5000))
    elif path == "/html":
        await _send(send, 200, {"content-type": "text/html; charset=utf-8"}, MP4)
    elif path == "/drip":  # a few bytes at a time, never done before the total deadline
        await _send(send, 200, {"content-type": "video/mp4"}, MP4[:400], pieces=400, pause=0.02)
    elif path == "/huge":  # chunked, no Content-Length: only the running count can stop it
        await _send(send, 200, {"content-type": "video/mp4"}, MP4 + bytes(CAP), pieces=16)
    elif path == "/huge-declared":
        await _send(send, 200, {"content-type": "video/mp4", "content-length": str(CAP + 1)}, b"")
    elif path == "/to-private":
        await _send(send, 302, {"location": "http://169.254.169.254/latest/meta-data/"}, b"")
    elif path == "/to-private-name":
        await _send(send, 307, {"location": "https://metadata.google.internal/computeMetadata/v1/"}, b"")
    else:
        await _send(send, 404, {}, b"")


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    with serving(app) as bound:
        yield bound


def output_fetcher(**kwargs: object) -> SafeFetcher:
    """As the worker builds it: https only, plain http only for the configured host."""
    options: dict = {"allow_http": False, "http_hosts": {"media.test"}, "max_bytes": CAP, "timeout_s": 5,
                     "resolver": resolver, **kwargs}
    return SafeFetcher({"media.test"}, **options)


class _Counting:
    """A sink that keeps nothing, so memory measures the fetcher alone."""

    def __init__(self) -> None:
        self.size = 0

    def write(self, data: bytes) -> int:
        self.size += len(data)
        return len(data)


def _fetch_measured(url: str) -> tuple[BaseException | None, int, _Counting]:
    """Fetch `url` under tracemalloc: (the error, peak bytes allocated above the start, the sink)."""
    sink = _Counting()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        try:
            output_fetcher().fetch_to(url, sink, expect=MP4_BODY)  # type: ignore[arg-type]
            error = None
        except FetchFailed as exc:
            error = exc
        return error, tracemalloc.get_traced_memory()[1] - base, sink
    finally:
        tracemalloc.stop()


def test_gzip_bomb_is_refused_within_twice_the_cap(port: int) -> None:
    error, peak, sink = _fetch_measured(f"http://media.test:{port}/bomb")
    assert isinstance(error, BodyRejected) and "decoded body exceeds" in error.reason, error
    assert sink.size <= CAP
    assert peak < 2 * CAP, f"memory grew {peak / 2**20:.1f} MiB against a {CAP / 2**20:.0f} MiB cap"


def test_stacked_encodings_are_refused_before_the_body(port: int) -> None:
    error, peak, sink = _fetch_measured(f"http://media.test:{port}/stacked")
    assert isinstance(error, BodyRejected) and "stacked Content-Encoding gzip, gzip" in error.reason
    assert sink.size == 0 and peak < 2 * CAP


def test_a_real_mp4_arrives_whole_also_through_one_gzip_layer(port: int) -> None:
    for path in ("/ok", "/ok-gzip"):
        result = output_fetcher().fetch_to(f"http://media.test:{port}{path}?sig=s", _Counting(), expect=MP4_BODY)
        assert (result.size, result.sha256) == (len(MP4), hashlib.sha256(MP4).hexdigest()), path


@pytest.mark.parametrize(("path", "words"), [
    ("/lie", "does not start like a MP4 video"),
    ("/html", "Content-Type 'text/html' is not a MP4 video"),
    ("/huge", f"body exceeds {CAP} bytes"),
    ("/huge-declared", f"Content-Length {CAP + 1} exceeds"),
])
def test_unacceptable_bodies_are_rejected_not_retried(port: int, path: str, words: str) -> None:
    with pytest.raises(BodyRejected) as info:
        output_fetcher().fetch_to(f"http://media.test:{port}{path}", _Counting(), expect=MP4_BODY)
    assert words in info.value.reason and not info.value.retryable


def test_slow_drip_ends_at_the_total_deadline(port: int) -> None:
    started = time.monotonic()
    with pytest.raises(FetchFailed) as info:
        output_fetcher(timeout_s=1.0).fetch_to(f"http://media.test:{port}/drip", _Counting(), expect=MP4_BODY)
    assert info.value.retryable and "timed out" in info.value.reason
    assert time.monotonic() - started < 2.5


@pytest.mark.parametrize("path", ["/to-private", "/to-private-name"])
def test_redirect_to_a_private_address_is_refused(port: int, path: str) -> None:
    with pytest.raises(FetchRefused):
        output_fetcher().fetch_to(f"http://media.test:{port}{path}", _Counting(), expect=MP4_BODY)


def test_plain_http_only_for_configured_hosts_and_domains_checked(port: int) -> None:
    with pytest.raises(FetchRefused) as info:
        output_fetcher(http_hosts=set()).fetch_to(f"http://media.test:{port}/ok", _Counting())
    assert "https required" in info.value.reason
    with pytest.raises(FetchRefused) as info, output_fetcher().stream(
        f"http://media.test:{port}/ok", domains=["cdn.provider.example"]
    ):
        pass
    assert "not an output domain" in info.value.reason
    with output_fetcher().stream(f"http://media.test:{port}/ok", domains=[".test"]) as (meta, chunks):
        assert meta.status == 200 and sum(len(c) for c in chunks) == len(MP4)
