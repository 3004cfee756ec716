"""SafeFetcher against real local servers: TLS with a pinned address, uvicorn chunked streams.

Self-contained (127.0.0.1 free ports, a trustme test CA, an injected resolver): it needs
neither the embedded stack nor the internet.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import socket
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BytesIO
from pathlib import Path

import pytest
import trustme
from asgi_server import serving

from adapters.fetcher import FetchFailed, SafeFetcher

VIDEO = random.Random(11).randbytes(400_000)


def resolver(host: str, port: int) -> list[str]:
    """Every test name is this machine; a real lookup would fail here."""
    if host.endswith(".test"):
        return ["127.0.0.1"]
    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


# --- TLS ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A test CA and a server certificate for svc.test: (chain, key, CA) files."""
    folder = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    server = ca.issue_cert("svc.test")
    chain, key, ca_file = folder / "chain.pem", folder / "key.pem", folder / "ca.pem"
    chain.write_bytes(b"".join(blob.bytes() for blob in server.cert_chain_pems))
    server.private_key_pem.write_to_path(str(key))
    ca.cert_pem.write_to_path(str(ca_file))
    return chain, key, ca_file


class _TLSServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, cert: Path, key: Path) -> None:
        super().__init__(("127.0.0.1", 0), _VideoHandler)
        self.sni: list[str | None] = []
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        context.sni_callback = lambda sock, name, ctx: self.sni.append(name)
        self.socket = context.wrap_socket(self.socket, server_side=True)

    def handle_error(self, request: object, client_address: object) -> None:
        """Handshakes the client rejects are part of the test."""


class _VideoHandler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "video/mp4")
        self.send_header("Content-Length", str(len(VIDEO)))
        self.end_headers()
        self.wfile.write(VIDEO)


@pytest.fixture
def tls_server(certificate: tuple[Path, Path, Path]) -> Iterator[_TLSServer]:
    server = _TLSServer(*certificate[:2])
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def tls_fetcher(cert: Path) -> SafeFetcher:
    return SafeFetcher(
        {"svc.test", "other.test", "127.0.0.1"},
        allow_http=False,
        max_bytes=1_000_000,
        timeout_s=5,
        resolver=resolver,
        ssl_context=ssl.create_default_context(cafile=str(cert)),
    )


def test_tls_is_verified_against_the_hostname_while_the_socket_uses_the_pinned_address(
    tls_server: _TLSServer, certificate: tuple[Path, Path, Path]
) -> None:
    result = tls_fetcher(certificate[2]).fetch_to(f"https://svc.test:{tls_server.server_port}/v?sig=1", BytesIO())
    assert result.sha256 == hashlib.sha256(VIDEO).hexdigest()
    assert tls_server.sni == ["svc.test"]


@pytest.mark.parametrize("host", ["other.test", "127.0.0.1"])
def test_tls_refuses_a_certificate_for_another_name(
    tls_server: _TLSServer, certificate: tuple[Path, Path, Path], host: str
) -> None:
    """Same address, other URL host: verification follows the URL, so the svc.test cert fails."""
    with pytest.raises(FetchFailed) as info:
        tls_fetcher(certificate[2]).fetch_to(f"https://{host}:{tls_server.server_port}/v", BytesIO())
    assert "TLS verification failed" in info.value.reason and not info.value.retryable


# --- uvicorn ------------------------------------------------------------------------------------


class _App:
    """Streams VIDEO chunked (no Content-Length) and counts requests in flight."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.peak = 0

    async def __call__(self, scope: dict, receive: object, send) -> None:
        assert scope["type"] == "http"
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            if scope["path"] == "/slow-ok":
                await asyncio.sleep(0.05)
            headers = [(b"content-type", b"video/mp4")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            for start in range(0, len(VIDEO), 50_000):
                await send({"type": "http.response.body", "body": VIDEO[start : start + 50_000], "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            self.in_flight -= 1


@pytest.fixture
def uvicorn_app() -> Iterator[tuple[_App, int]]:
    app = _App()
    with serving(app) as port:
        yield app, port


def http_fetcher(**kwargs: object) -> SafeFetcher:
    options: dict = {"max_bytes": 1_000_000, "timeout_s": 5, "resolver": resolver, **kwargs}
    return SafeFetcher({"media.test"}, **options)


def test_chunked_stream_from_uvicorn(uvicorn_app: tuple[_App, int]) -> None:
    _, port = uvicorn_app
    result = http_fetcher().fetch_to(f"http://media.test:{port}/video", BytesIO())
    assert (result.size, result.sha256) == (len(VIDEO), hashlib.sha256(VIDEO).hexdigest())
    assert result.content_type == "video/mp4"


def test_chunked_stream_over_cap_aborts(uvicorn_app: tuple[_App, int]) -> None:
    _, port = uvicorn_app
    with pytest.raises(FetchFailed) as info:
        http_fetcher(max_bytes=120_000).fetch_to(f"http://media.test:{port}/video", BytesIO())
    assert "exceeds 120000" in info.value.reason


def test_check_all_bounds_concurrency(uvicorn_app: tuple[_App, int]) -> None:
    app, port = uvicorn_app
    urls = [f"http://media.test:{port}/slow-ok?n={n}" for n in range(16)]
    results = http_fetcher().check_all(urls, concurrency=4)
    assert all(r.ok and r.status == 200 for r in results)
    assert 1 < app.peak <= 4
