"""SafeFetcher: the SSRF corpus (docs/architecture.md, "Security"), limits and URL-check classification.

Servers are real http.server instances on 127.0.0.1 free ports; names that must resolve to
specific addresses use an injected resolver (there is no DNS here, and tests must not need it).
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BytesIO

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.fetcher import (
    _READ,
    FetchFailed,
    FetchRefused,
    SafeFetcher,
    _allowed_entry,
    _DeadlineStream,
    _PinnedBackend,
    address_refusal,
    redact,
)

VIDEO = random.Random(7).randbytes(300_000)

# Route: (status, headers, body, send Content-Length); or a callable handling the request itself.
Route = tuple[int, dict[str, str], bytes, bool] | Callable[[BaseHTTPRequestHandler], None]


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, routes: dict[str, Route]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.routes = routes
        self.seen: list[tuple[str, str, dict[str, str]]] = []

    @property
    def port(self) -> int:
        return self.server_address[1]

    def handle_error(self, request: object, client_address: object) -> None:
        """Clients hanging up mid-body (size and time caps) are expected here."""


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _serve(self) -> None:
        path = self.path.split("?", 1)[0]
        self.server.seen.append((self.command, path, {k.lower(): v for k, v in self.headers.items()}))
        route = self.server.routes.get(path, (404, {}, b"not found", True))
        if callable(route):
            route(self)
            return
        status, headers, body, with_length = route
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        if with_length:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_HEAD = _serve


@pytest.fixture
def serve() -> Iterator[Callable[[dict[str, Route]], _Server]]:
    started: list[_Server] = []

    def start(routes: dict[str, Route]) -> _Server:
        server = _Server(routes)
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.shutdown()
        server.server_close()


def fetcher(allowed: set[str] | None = None, **kwargs: object) -> SafeFetcher:
    options: dict = {"max_bytes": 1_000_000, "timeout_s": 3.0, **kwargs}
    return SafeFetcher(allowed or set(), **options)


def mapping_resolver(answers: dict[str, list[str]], calls: list[str] | None = None):
    def resolve(host: str, port: int) -> list[str]:
        if calls is not None:
            calls.append(host)
        if host not in answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return answers[host]

    return resolve


def assert_refused(f: SafeFetcher, url: str) -> None:
    started = time.monotonic()
    with pytest.raises(FetchRefused):
        f.fetch_to(url, BytesIO())
    result = f.check(url)
    assert (result.ok, result.retryable, result.status) == (False, False, None), result
    assert time.monotonic() - started < 1.0


# --- the corpus ---------------------------------------------------------------------------------

CORPUS = [
    "http://0/",
    "http://127.1/",
    "http://0177.0.0.1/",
    "http://2852039166/",
    "http://0x7f000001/",
    "http://0x7f.1/",
    "http://[::]/",
    "http://[::1]/",
    "http://[0:0:0:0:0:ffff:127.0.0.1]/",
    "http://10.0.0.1/",
    "http://169.254.169.254/latest/meta-data/",
    "http://metadata.google.internal/",
    "http://metadata.google.internal./computeMetadata/v1/",
    "http://1.1.1.1 &@2.2.2.2# @3.3.3.3/",
    "http://user:pw@example.com/",
    "file:///etc/passwd",
    "gopher://x",
    "ftp://example.com/a",
    "data:text/plain,hi",
    "http://localhost/",
    "http://printer.local/",
    "http://metadata/",
]

# 127.0.0.1 and 10.0.0.1 wrapped in IPv6: mapped, IPv4-compatible, 6to4, NAT64, Teredo.
IPV6_WRAPPED = [
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:a00:1]/",
    "http://[::127.0.0.1]/",
    "http://[2002:7f00:1::]/",
    "http://[2002:a00:1::1]/",
    "http://[64:ff9b::7f00:1]/",
    "http://[64:ff9b::10.0.0.1]/",
    "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/",
    "http://[2001:0:4136:e378:8000:63bf:f5ff:fffe]/",
]


@pytest.mark.parametrize("url", CORPUS + IPV6_WRAPPED)
def test_corpus_is_refused(url: str) -> None:
    assert_refused(fetcher(), url)


def test_refusals_do_not_depend_on_dns() -> None:
    """Names in private domains are refused before any lookup, even where they would resolve."""
    calls: list[str] = []
    resolve = mapping_resolver({"metadata.google.internal": ["8.8.8.8"]}, calls)
    assert_refused(fetcher(resolver=resolve), "http://metadata.google.internal/")
    assert calls == []


@pytest.mark.parametrize(
    "answers",
    [
        ["10.1.2.3"],
        ["93.184.216.34", "127.0.0.1"],  # every answer is checked, not just the first
        ["::ffff:169.254.169.254"],
        ["64:ff9b::c0a8:101"],  # NAT64 of 192.168.1.1
        ["fd00::1"],
        ["224.0.0.1"],
        ["100.64.0.1"],
        ["not-an-address"],
    ],
)
def test_host_resolving_to_a_non_global_address_is_refused(answers: list[str]) -> None:
    f = fetcher(resolver=mapping_resolver({"cdn.example.com": answers}))
    assert_refused(f, "https://cdn.example.com/out.mp4?sig=1")


def test_allowed_hosts_match_exactly(serve) -> None:
    server = serve({"/video": (200, {}, b"ok", True)})
    resolve = mapping_resolver(dict.fromkeys(["svc.test", "svc.test.evil.com", "a.svc.test"], ["127.0.0.1"]))
    f = fetcher({"svc.test"}, resolver=resolve)
    assert f.fetch_to(f"http://SVC.test:{server.port}/video", BytesIO()).size == 2
    for host in ("svc.test.evil.com", "a.svc.test"):
        assert_refused(f, f"http://{host}:{server.port}/video")


def test_allowed_host_with_port_admits_that_port_only(serve) -> None:
    other = serve({"/video": (200, {}, b"internal", True)})
    server = serve(
        {
            "/video": (200, {}, b"ok", True),
            "/r": (302, {"Location": f"http://127.0.0.1:{other.port}/video"}, b"", True),
        }
    )
    f = fetcher({f"127.0.0.1:{server.port}"})
    assert f.fetch_to(f"http://127.0.0.1:{server.port}/video", BytesIO()).size == 2
    assert_refused(f, f"http://127.0.0.1:{server.port}/r")
    assert_refused(f, f"http://127.0.0.1:{other.port}/video")
    assert other.seen == []


@pytest.mark.parametrize(
    ("entry", "parsed"),
    [
        ("LocalHost", ("localhost", None)),
        ("127.0.0.1:8900", ("127.0.0.1", 8900)),
        ("::1", ("::1", None)),
        ("[::1]:8333", ("::1", 8333)),
        ("[::1]", ("::1", None)),
    ],
)
def test_allowed_entries(entry: str, parsed: tuple[str, int | None]) -> None:
    assert _allowed_entry(entry) == parsed


def test_https_only_when_http_not_allowed() -> None:
    f = fetcher(allow_http=False, resolver=mapping_resolver({}))
    assert_refused(f, "http://example.com/")
    result = f.check("https://example.com/")  # admitted; fails later, at the (fake) DNS lookup
    assert "DNS" in result.reason and result.retryable


# --- address rules ------------------------------------------------------------------------------


def _wrapped(v4: ipaddress.IPv4Address) -> list[ipaddress.IPv6Address]:
    n = int(v4)
    return [
        ipaddress.IPv6Address((0xFFFF << 32) | n),  # ::ffff:a.b.c.d
        ipaddress.IPv6Address((0x2002 << 112) | (n << 80)),  # 6to4
        ipaddress.IPv6Address(int(ipaddress.IPv6Address("64:ff9b::")) | n),  # NAT64
    ]


@given(st.ip_addresses(v=4).filter(lambda ip: not ip.is_global or ip.is_multicast))
def test_non_global_ipv4_is_refused_however_wrapped(v4: ipaddress.IPv4Address) -> None:
    assert address_refusal(v4) is not None
    for v6 in _wrapped(v4):
        assert address_refusal(v6) is not None, v6


_RELAY = ipaddress.IPv4Network("192.88.99.0/24")  # global to Python, refused here (deprecated relay anycast)


@given(st.ip_addresses(v=4).filter(lambda ip: ip.is_global and not ip.is_multicast and not ip.is_reserved
                                    and ip not in _RELAY))
def test_global_ipv4_passes_plain_mapped_and_nat64(v4: ipaddress.IPv4Address) -> None:
    """IPv6-only networks reach IPv4 hosts through NAT64: those must keep working."""
    mapped, _, nat64 = _wrapped(v4)
    assert (address_refusal(v4), address_refusal(mapped), address_refusal(nat64)) == (None, None, None)


@pytest.mark.parametrize("address", ["2606:4700:4700::1111", "8.8.8.8", "2002:808:808::1"])
def test_global_addresses_pass(address: str) -> None:
    assert address_refusal(address) is None


@pytest.mark.parametrize(("address", "why"), [
    ("fec0::1", "site-local"),  # is_global in Python 3.11
    ("feff:ffff::1", "site-local"),
    ("3fff::1", "documentation"),  # is_global in Python 3.11
    ("5f00::1", "segment routing"),
    ("64:ff9b:1::a00:1", "local-use NAT64"),  # NAT64 of 10.0.0.1 in the local-use prefix
    ("64:ff9b:1::808:808", "local-use NAT64"),  # ... and of a public address: local all the same
    ("::10.0.0.1", "IPv4-compatible"),
    ("::8.8.8.8", "IPv4-compatible"),
    ("::ffff:0:a00:1", "IPv4-translated"),
    ("192.88.99.1", "6to4 relay"),
    ("2002:c058:6301::1", "6to4 relay"),  # 6to4 of the relay anycast address
    ("2002:a00:1::1", "private"),  # 6to4 of 10.0.0.1
    ("2002:7f00:1::1", "loopback"),  # 6to4 of 127.0.0.1
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "embeds 192.0.2.45"),  # Teredo, client 192.0.2.45
    ("2001:0:4136:e378:8000:63bf:f5ff:fffe", "private"),  # Teredo, client 10.0.0.1
    ("64:ff9b::7f00:1", "loopback"),  # NAT64 of 127.0.0.1
    ("::ffff:169.254.169.254", "link-local"),  # the cloud metadata address, mapped
    ("fc00::1", "private"),
    ("fe80::1", "link-local"),
    ("ff02::1", "multicast"),
    ("2001:db8::1", "private"),
    ("100::1", "private"),  # discard-only
    ("100.64.0.1", "not global"),
])
def test_special_ranges_are_refused(address: str, why: str) -> None:
    """Each range the `ipaddress` module may miss, and each way IPv6 carries a private IPv4 address."""
    refusal = address_refusal(address)
    assert refusal is not None and why in refusal, refusal


def test_backend_never_connects_to_an_unchecked_name() -> None:
    """The last line against rebinding: only names admitted in this operation are connectable."""
    backend = _PinnedBackend(time.monotonic() + 1)
    with pytest.raises(FetchRefused):
        backend.connect_tcp("127.0.0.1", 9)


# --- redaction ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "https://b.s3.amazonaws.com/o.mp4?X-Amz-Signature=abc&X-Amz-Credential=k",
            "https://b.s3.amazonaws.com/o.mp4",
        ),
        ("https://u:secret@h.example/p#frag", "https://h.example/p"),
        ("http://1.1.1.1 &@2.2.2.2# @3.3.3.3/", "http://2.2.2.2"),
        ("not a url?token=1", "not a url"),
        ("https://h.example/a\r\nInjected: 1", "https://h.example/a??Injected: 1"),
    ],
)
def test_redact(url: str, expected: str) -> None:
    assert redact(url) == expected


# --- DNS failures -------------------------------------------------------------------------------


def test_dns_failure_is_quick_and_retryable() -> None:
    f = fetcher(resolver=mapping_resolver({}))
    started = time.monotonic()
    result = f.check("https://cdn.example.com/a.jpg")
    assert (result.ok, result.retryable, result.status) == (False, True, None)
    assert "DNS" in result.reason
    with pytest.raises(FetchFailed) as info:
        f.fetch_to("https://cdn.example.com/a.jpg", BytesIO())
    assert info.value.retryable
    assert time.monotonic() - started < 0.5


def test_hanging_dns_is_bounded_by_the_total_timeout() -> None:
    def hang(host: str, port: int) -> list[str]:
        time.sleep(3)
        return ["8.8.8.8"]

    started = time.monotonic()
    result = fetcher(resolver=hang, timeout_s=0.3).check("https://cdn.example.com/a.jpg")
    assert result.retryable and "timed out" in result.reason
    assert time.monotonic() - started < 1.0


# --- against local servers ----------------------------------------------------------------------


def test_streams_body_with_size_and_sha256(serve) -> None:
    server = serve({"/video": (200, {"Content-Type": "video/mp4"}, VIDEO, True)})
    sink = BytesIO()
    result = fetcher({"127.0.0.1"}).fetch_to(f"http://127.0.0.1:{server.port}/video?sig=x", sink)
    assert sink.getvalue() == VIDEO
    assert result.size == len(VIDEO)
    assert result.sha256 == hashlib.sha256(VIDEO).hexdigest()
    assert (result.status, result.content_type) == (200, "video/mp4")
    assert result.final_url_redacted == f"http://127.0.0.1:{server.port}/video"


class _ThreadRecordingSha256:
    """hashlib.sha256 stand-in that notes the thread of every update."""

    threads: list[int] = []
    real = hashlib.sha256

    def __init__(self) -> None:
        self._digest = self.real()

    def update(self, data: bytes) -> None:
        type(self).threads.append(threading.get_ident())
        self._digest.update(data)

    def hexdigest(self) -> str:
        return self._digest.hexdigest()


def test_fetch_to_hashes_off_the_reading_thread(serve, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sha256 runs on its own thread, overlapped with the socket reads (adapters/hashing.py)."""
    monkeypatch.setattr(hashlib, "sha256", _ThreadRecordingSha256)
    _ThreadRecordingSha256.threads = []
    server = serve({"/video": (200, {"Content-Type": "video/mp4"}, VIDEO, True)})
    result = fetcher({"127.0.0.1"}).fetch_to(f"http://127.0.0.1:{server.port}/video", BytesIO())
    monkeypatch.undo()
    assert result.sha256 == hashlib.sha256(VIDEO).hexdigest()
    assert _ThreadRecordingSha256.threads
    assert threading.get_ident() not in _ThreadRecordingSha256.threads


def test_hashing_thread_ends_when_the_fetch_fails(serve) -> None:
    server = serve({"/big": (200, {}, b"x" * 5000, False)})
    with pytest.raises(FetchFailed):
        fetcher({"127.0.0.1"}, max_bytes=1000).fetch_to(f"http://127.0.0.1:{server.port}/big", BytesIO())
    assert not [t for t in threading.enumerate() if t.name == "sha256"]


def test_socket_reads_ask_for_a_mebibyte() -> None:
    """httpcore asks for 64 KiB per read; the fetcher's stream asks for _READ (1 MiB) at least."""
    asked: list[int] = []

    class Stream:
        def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            asked.append(max_bytes)
            return b""

    stream = _DeadlineStream(Stream(), time.monotonic() + 5)  # type: ignore[arg-type]
    stream.read(64 * 1024, 1.0)
    stream.read(4 * _READ, 1.0)
    assert asked == [_READ, 4 * _READ] and _READ >= 1024 * 1024


def test_stream_yields_meta_and_chunks(serve) -> None:
    server = serve({"/video": (200, {"Content-Type": "video/mp4"}, VIDEO, True)})
    with fetcher({"127.0.0.1"}).stream(f"http://127.0.0.1:{server.port}/video") as (meta, chunks):
        assert meta.content_length == len(VIDEO)
        assert b"".join(chunks) == VIDEO


@pytest.mark.parametrize(("status", "retryable"), [(410, False), (503, True)])
def test_stream_raises_on_error_status(serve, status: int, retryable: bool) -> None:
    server = serve({"/x": (status, {}, b"", True)})
    with (
        pytest.raises(FetchFailed) as info,
        fetcher({"127.0.0.1"}).stream(f"http://127.0.0.1:{server.port}/x"),
    ):
        pytest.fail("a body was yielded for an error status")
    assert (info.value.status, info.value.retryable) == (status, retryable)


def test_content_length_over_cap_is_refused_before_the_body(serve) -> None:
    server = serve({"/big": (200, {}, b"x" * 5000, True)})
    with pytest.raises(FetchFailed) as info:
        fetcher({"127.0.0.1"}, max_bytes=1000).fetch_to(f"http://127.0.0.1:{server.port}/big", BytesIO())
    assert "Content-Length 5000" in info.value.reason and not info.value.retryable


def test_streamed_body_over_cap_aborts(serve) -> None:
    server = serve({"/big": (200, {}, b"x" * 5000, False)})  # no Content-Length: close-delimited
    sink = BytesIO()
    with pytest.raises(FetchFailed) as info:
        fetcher({"127.0.0.1"}, max_bytes=1000).fetch_to(f"http://127.0.0.1:{server.port}/big", sink)
    assert "exceeds 1000" in info.value.reason and not info.value.retryable
    assert len(sink.getvalue()) <= 1000


def test_redirect_within_allowed_host_is_followed_without_a_second_lookup(serve) -> None:
    server = serve(
        {
            "/start": (302, {"Location": "/hop?sig=2"}, b"", True),
            "/hop": (307, {"Location": "/video"}, b"", True),
            "/video": (200, {}, VIDEO, True),
        }
    )
    calls: list[str] = []
    f = fetcher({"svc.test"}, resolver=mapping_resolver({"svc.test": ["127.0.0.1"]}, calls))
    result = f.fetch_to(f"http://svc.test:{server.port}/start?sig=1", BytesIO())
    assert result.sha256 == hashlib.sha256(VIDEO).hexdigest()
    assert result.final_url_redacted == f"http://svc.test:{server.port}/video"
    assert calls == ["svc.test"]


def test_redirect_to_a_host_that_is_not_allowed_is_refused(serve) -> None:
    target = serve({"/video": (200, {}, b"internal", True)})
    origin = serve({"/r": (302, {"Location": f"http://127.0.0.1:{target.port}/video"}, b"", True)})
    f = fetcher({"localhost"})
    assert_refused(f, f"http://localhost:{origin.port}/r")
    assert f.check(f"http://localhost:{origin.port}/r").reason.endswith("127.0.0.1 (loopback)")
    assert target.seen == []
    assert [path for _, path, _ in origin.seen] == ["/r", "/r", "/r"]


def test_redirect_loop_is_capped(serve) -> None:
    server = serve({"/loop": (302, {"Location": "/loop"}, b"", True)})
    with pytest.raises(FetchFailed) as info:
        fetcher({"127.0.0.1"}, max_redirects=3).fetch_to(f"http://127.0.0.1:{server.port}/loop", BytesIO())
    assert "more than 3 redirects" in info.value.reason and not info.value.retryable
    assert len(server.seen) == 4


def test_dns_rebinding_cannot_switch_the_address(serve) -> None:
    """The name is resolved once; the connection goes to that answer (svc.test has no real DNS)."""
    server = serve({"/video": (200, {}, b"pinned", True)})
    answers = iter([["127.0.0.1"], ["10.66.66.66"]])
    calls: list[str] = []

    def rebinding(host: str, port: int) -> list[str]:
        calls.append(host)
        return next(answers)

    f = fetcher({"svc.test"}, resolver=rebinding)
    assert f.fetch_to(f"http://svc.test:{server.port}/video", BytesIO()).size == 6
    assert calls == ["svc.test"]
    assert server.seen[0][2]["host"] == f"svc.test:{server.port}"


def _no_head(handler: BaseHTTPRequestHandler) -> None:
    if handler.command == "HEAD":
        handler.send_response(405)
        handler.send_header("Content-Length", "0")
        handler.end_headers()
        return
    handler.send_response(206 if handler.headers.get("Range") == "bytes=0-0" else 200)
    handler.send_header("Content-Type", "image/jpeg")
    handler.send_header("Content-Length", "1")
    handler.end_headers()
    handler.wfile.write(b"\xff")


@pytest.mark.parametrize(
    ("path", "ok", "status", "retryable"),
    [
        ("/image", True, 200, False),
        ("/missing", False, 404, False),
        ("/down", False, 503, True),
        ("/slowdown", False, 429, True),
        ("/timeout", False, 408, True),
        ("/no-head", True, 206, False),
    ],
)
def test_check_classifies(serve, path: str, ok: bool, status: int, retryable: bool) -> None:
    server = serve(
        {
            "/image": (200, {"Content-Type": "image/jpeg"}, b"jpeg", True),
            "/down": (503, {}, b"", True),
            "/slowdown": (429, {}, b"", True),
            "/timeout": (408, {}, b"", True),
            "/no-head": _no_head,
        }
    )
    result = fetcher({"127.0.0.1"}).check(f"http://127.0.0.1:{server.port}{path}")
    assert (result.ok, result.status, result.retryable) == (ok, status, retryable), result
    assert server.seen[0][0] == "HEAD"
    if path == "/no-head":
        assert server.seen[1][0] == "GET" and server.seen[1][2]["range"] == "bytes=0-0"
        assert result.content_type == "image/jpeg"


def test_check_all_keeps_order(serve) -> None:
    server = serve({"/a": (200, {}, b"", True), "/b": (503, {}, b"", True)})
    base = f"http://127.0.0.1:{server.port}"
    results = fetcher({"127.0.0.1"}).check_all([f"{base}/a", f"{base}/b", "file:///etc/passwd"], concurrency=2)
    assert [(r.ok, r.status, r.retryable) for r in results] == [
        (True, 200, False),
        (False, 503, True),
        (False, None, False),
    ]


def _slow_headers(handler: BaseHTTPRequestHandler) -> None:
    time.sleep(2)


def _drip(handler: BaseHTTPRequestHandler) -> None:
    handler.send_response(200)
    handler.end_headers()
    for _ in range(40):  # every read is quick; only the total deadline can stop this
        handler.wfile.write(b"x")
        handler.wfile.flush()
        time.sleep(0.05)


@pytest.mark.parametrize("path", ["/slow", "/drip"])
def test_total_time_is_capped(serve, path: str) -> None:
    server = serve({"/slow": _slow_headers, "/drip": _drip})
    started = time.monotonic()
    with pytest.raises(FetchFailed) as info:
        fetcher({"127.0.0.1"}, timeout_s=0.5).fetch_to(f"http://127.0.0.1:{server.port}{path}", BytesIO())
    assert info.value.retryable and "timed out" in info.value.reason
    assert time.monotonic() - started < 1.2


def test_connection_refused_is_retryable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    result = fetcher({"127.0.0.1"}).check(f"http://127.0.0.1:{port}/")
    assert (result.ok, result.retryable) == (False, True)


def test_signed_query_strings_never_reach_logs_or_errors(serve, caplog: pytest.LogCaptureFixture) -> None:
    server = serve(
        {
            "/r": (302, {"Location": "/gone?X-Amz-Signature=SECRET2"}, b"", True),
            "/gone": (404, {}, b"", True),
        }
    )
    caplog.set_level(logging.DEBUG)
    f = fetcher({"127.0.0.1"})
    url = f"http://127.0.0.1:{server.port}/r?X-Amz-Signature=SECRET1"
    with pytest.raises(FetchFailed) as info:
        f.fetch_to(url, BytesIO())
    check = f.check(url)
    refused = f.check("http://10.0.0.1/o.mp4?X-Amz-Signature=SECRET3")
    text = " ".join([caplog.text, str(info.value), check.reason, refused.reason])
    assert "SECRET" not in text
    assert "/gone" in str(info.value)
