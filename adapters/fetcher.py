"""One SSRF-safe HTTP fetcher for provider outputs and catalog URL checks.

Provider output URLs and catalog image URLs come from outside, so every request goes through the
checks listed in docs/architecture.md ("Security"):

- scheme allowlist: https; plain http only when ``allow_http`` (catalog images) or for a host listed
  in ``http_hosts`` (provider outputs: https only except configured hosts such as the emulator on
  loopback in development); no credentials in URLs;
- provider outputs: the first URL's host must be one of the provider's output domains
  (``stream(url, domains=...)``, exact name or ``.suffix``); redirects from there are checked
  against the rules here, like every hop;
- the host is resolved ONCE per operation and every answer must be a global unicast address
  (IPv4 embedded in IPv6 is unwrapped first; `_NOT_GLOBAL` names the ranges that ``is_global``
  misses, such as site-local fec0::/10); hosts in ``allowed_hosts`` skip only the name and
  address checks. Entries match the URL's ASCII host exactly (case-insensitive): ``"host"`` for
  any port, ``"host:port"`` / ``"[::1]:port"`` for one port (prefer these for loopback services:
  "127.0.0.1" alone also admits Postgres and Temporal on that machine);
- the socket connects to the checked address itself, never to a name (no DNS rebinding);
- redirects are followed by hand and each hop is checked again; size and total time are capped;
- the body is never decoded by httpx: raw bytes are read (``iter_raw``) and at most one gzip or
  deflate layer is decoded by a bounded streaming decoder that counts decoded bytes against the
  cap (adapters/body_decoding.py); stacked or unknown encodings are refused;
- ``stream(url, expect=...)`` checks the Content-Type and the first bytes (magic number) before
  any byte is handed out (``MP4_BODY``: an ISO BMFF ``ftyp`` box);
- URLs in errors and logs go through `redact` (signed query strings are credentials).

Pinning and TLS: the URL is never rewritten. httpx builds the request (Host header, TLS SNI and
certificate verification all use the URL's hostname) and only the TCP connect is redirected: the
transport's httpcore pool runs on `_PinnedBackend`, whose ``connect_tcp`` ignores the name it is
given and connects to the addresses checked for that name in this operation (it refuses any name
that was not checked). So TLS is still verified against the hostname while the socket goes to
the checked IP, and no second lookup happens anywhere.

The API is synchronous (activities run in threads). For bounded concurrent URL checks use
`SafeFetcher.check_all`, or call `check` from your own thread pool / ``asyncio.to_thread``: a
fetcher holds no per-request state, so one instance is safe to share between threads.
"""

from __future__ import annotations

import contextvars
import ipaddress
import logging
import re
import socket
import ssl
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING, BinaryIO, NoReturn
from urllib.parse import urlsplit

import httpcore
import httpx
from pydantic import BaseModel, ConfigDict

from adapters.body_decoding import (
    BodyTooLarge,
    BodyUndecodable,
    EncodingRefused,
    content_codings,
    decoded_chunks,
)
from adapters.hashing import BackgroundSha256

if TYPE_CHECKING:
    from config.settings import Settings

log = logging.getLogger(__name__)

Resolver = Callable[[str, int], list[str]]
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
# Ranges that the `ipaddress` module (3.11) calls global, or may call global in another version,
# although no public server lives there: each is refused by name, whatever Python says.
_NOT_GLOBAL = tuple((ipaddress.ip_network(net), name) for net, name in (
    ("fec0::/10", "site-local (deprecated, RFC 3879)"),
    ("3fff::/20", "documentation (RFC 9637)"),
    ("5f00::/16", "segment routing (RFC 9602)"),
    ("64:ff9b:1::/48", "local-use NAT64 (RFC 8215)"),
    ("::/96", "IPv4-compatible (deprecated)"),
    ("::ffff:0:0:0/96", "IPv4-translated (SIIT)"),
    ("192.88.99.0/24", "6to4 relay anycast (deprecated, RFC 7526)"),
))
_HOST_NAME = re.compile(r"^[a-z0-9_-]+(\.[a-z0-9_-]+)*$")
# Names that can never be public (RFC 6761/6762/8375, ICANN's 2024 ".internal"): refused without a
# lookup, so e.g. metadata.google.internal is refused even where it would resolve.
_PRIVATE_SUFFIXES = ("localhost", "local", "internal", "home.arpa")
# Body reads: each socket read asks for up to _READ bytes (httpcore asks for 64 KiB; per read its
# h11 parsing and our checks cost the same whatever the size, so larger reads cost less per byte),
# and a decoder hands out at most _CHUNK decoded bytes at a time. Memory per fetch stays a few MiB.
_READ = 1024 * 1024
_CHUNK = 1024 * 1024
_IN_FETCH = contextvars.ContextVar("reelqueue_fetcher_in_fetch", default=False)
# getaddrinfo has no timeout of its own: lookups run here so the total deadline still holds.
_DNS_POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="fetcher-dns")


class _DropHttpcoreTrace(logging.Filter):
    """httpcore's DEBUG trace logs response headers, and a Location may be a signed URL."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _IN_FETCH.get()


_TRACE_FILTER = _DropHttpcoreTrace()
for _name in ("httpcore.connection", "httpcore.http11", "httpcore.http2"):
    logging.getLogger(_name).addFilter(_TRACE_FILTER)  # drops records of our requests only


class FetchError(Exception):
    """Base of fetch errors; ``reason`` already has the URL redacted."""

    def __init__(self, reason: str, *, retryable: bool, status: int | None = None, dns: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable
        self.status = status
        self.dns = dns  # the host name did not resolve: every URL on that host will fail the same way

    @property
    def public(self) -> str:
        """The reason in words that name nothing inside the network (no address a name resolves to,
        no connection error's text): what a tenant or a report is told; `reason` goes to the log."""
        if self.dns:
            return "the host name did not resolve"
        if self.status is not None:
            return f"the server answered HTTP {self.status}"
        return "the connection failed or timed out"


class FetchRefused(FetchError):
    """Security refusal (scheme, address, name, redirect target): never retryable."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason, retryable=False)

    @property
    def public(self) -> str:
        return "not allowed: only https URLs of public addresses are fetched"


class FetchFailed(FetchError):
    """The fetch was allowed but did not succeed; ``retryable`` says whether trying later may help."""


class BodyRejected(FetchFailed):
    """The server answered, but not with an acceptable body (encoding, size, type, magic number)."""

    def __init__(self, reason: str, status: int | None = None) -> None:
        super().__init__(reason, retryable=False, status=status)

    @property
    def public(self) -> str:
        return "the server's answer is not a usable file (its type, size or encoding)"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class BodyExpectation(_Frozen):
    """What a body must look like: an allowed Content-Type (or none at all) and its first bytes."""

    name: str
    content_types: frozenset[str]
    head_bytes: int
    magic: Callable[[bytes], bool]


def _is_iso_bmff(head: bytes) -> bool:
    return head[4:8] == b"ftyp"


# MP4/MOV: the first box is `ftyp`. CDNs often serve octet-stream; the magic number decides then.
MP4_BODY = BodyExpectation(
    name="MP4 video",
    content_types=frozenset({"video/mp4", "video/quicktime", "application/octet-stream", "binary/octet-stream"}),
    head_bytes=8,
    magic=_is_iso_bmff,
)


class ResponseMeta(_Frozen):
    status: int
    content_type: str | None
    content_length: int | None
    final_url_redacted: str


class FetchResult(_Frozen):
    size: int
    sha256: str
    content_type: str | None
    final_url_redacted: str
    status: int


class UrlCheck(_Frozen):
    ok: bool
    status: int | None
    reason: str
    retryable: bool
    content_type: str | None = None


def redact(url: str) -> str:
    """The URL without query, fragment and userinfo: signed URLs carry credentials there."""
    cut = re.split(r"[?#]", str(url), maxsplit=1)[0]
    scheme, sep, rest = cut.partition("://")
    if sep:
        authority, slash, path = rest.partition("/")
        cut = f"{scheme}{sep}{authority.rpartition('@')[2]}{slash}{path}"
    return "".join(c if c.isprintable() else "?" for c in cut)


def system_resolver(host: str, port: int) -> list[str]:
    """All TCP addresses getaddrinfo gives for the host, in its order, without duplicates."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def _refusal_of(ip: IPAddress) -> str | None:
    special = next((name for net, name in _NOT_GLOBAL if ip.version == net.version and ip in net), None)
    if special is not None:
        return special
    checks = (
        ("unspecified", ip.is_unspecified),
        ("loopback", ip.is_loopback),
        ("multicast", ip.is_multicast),
        ("link-local", ip.is_link_local),
        ("private", ip.is_private),
        ("reserved", ip.is_reserved),
        ("not global", not ip.is_global),
    )
    return next((name for name, hit in checks if hit), None)


def address_refusal(address: str | IPAddress) -> str | None:
    """Why this address must not be fetched from, or None when it is a global unicast address.

    IPv4 inside IPv6 is judged as IPv4: mapped and NAT64 addresses only stand for the IPv4 one
    (so NAT64 of a public address passes), 6to4 and Teredo must pass as both.
    """
    ip = ipaddress.ip_address(address) if isinstance(address, str) else address
    if isinstance(ip, ipaddress.IPv6Address) and (v4 := _embedded_ipv4(ip)) is not None:
        why = _refusal_of(v4)
        if why is not None:
            return f"embeds {v4}: {why}"
        if ip.ipv4_mapped is not None or ip in _NAT64:
            return None
    return _refusal_of(ip)


def _ip_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _name_refusal(host: str) -> str | None:
    """Refuse names that can only reach internal hosts, before any lookup."""
    name = host.rstrip(".")
    if not _HOST_NAME.match(name):
        return "invalid host name"
    if "." not in name and not name.isdigit():  # digits only is a numeric IPv4 form, not a name
        return "single-label host name (resolved through search domains)"
    if any(name == s or name.endswith("." + s) for s in _PRIVATE_SUFFIXES):
        return "reserved private domain"
    return None


def _left(deadline: float, timeout: float | None, exc: type[Exception]) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise exc("total fetch time exceeded")
    return left if timeout is None else min(timeout, left)


def _retryable_status(status: int) -> bool:
    return status in (408, 429) or status >= 500


class _DeadlineStream(httpcore.NetworkStream):
    """Clamps every socket operation to the operation's total deadline."""

    def __init__(self, stream: httpcore.NetworkStream, deadline: float) -> None:
        self._stream = stream
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        """Up to `_READ` bytes (at least what was asked for): h11 takes any amount a read returns."""
        return self._stream.read(max(max_bytes, _READ), _left(self._deadline, timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _left(self._deadline, timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        t = _left(self._deadline, timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, t), self._deadline)

    def get_extra_info(self, info: str) -> object:
        return self._stream.get_extra_info(info)


class _PinnedBackend(httpcore.SyncBackend):
    """Connects only to addresses checked for the requested (name, port) in this operation."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.pins: dict[tuple[str, int], list[str]] = {}  # admitted (host, port) -> checked addresses
        self.answers: dict[str, list[str]] = {}  # one lookup per host and operation

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: object = None,
    ) -> httpcore.NetworkStream:
        addresses = self.pins.get((host.lower(), port))
        if not addresses:
            raise FetchRefused(f"connection to unchecked host {host!r} port {port}")
        error: Exception = httpcore.ConnectError("no address")
        for address in addresses:  # all were checked: trying the next one is safe
            t = _left(self.deadline, timeout, httpcore.ConnectTimeout)
            try:
                stream = super().connect_tcp(address, port, t, local_address, socket_options)  # type: ignore[arg-type]
            except httpcore.ConnectError as exc:
                error = exc
                continue
            return _DeadlineStream(stream, self.deadline)
        raise error

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: object = None
    ) -> httpcore.NetworkStream:
        raise FetchRefused("unix sockets are never fetched")


class _PinnedTransport(httpx.HTTPTransport):
    """httpx's transport on our backend (HTTPTransport takes no backend argument: swap the pool)."""

    def __init__(self, backend: _PinnedBackend, ssl_context: ssl.SSLContext) -> None:
        super().__init__(verify=ssl_context, trust_env=False)
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context, network_backend=backend, max_connections=4, retries=0
        )


def _scrub(exc: BaseException) -> str:
    """Exception text with anything that looks like a query string cut (messages may quote data)."""
    return re.sub(r"\?\S*", "?…", str(exc))


def _tls_verify_failed(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


@contextmanager
def _mapped_errors(shown: str) -> Iterator[None]:
    """httpx transport errors -> FetchFailed with the redacted URL (messages carry no URL)."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise FetchFailed(f"{shown}: timed out ({type(exc).__name__})", retryable=True) from exc
    except httpx.ConnectError as exc:
        if _tls_verify_failed(exc):
            raise FetchFailed(f"{shown}: TLS verification failed", retryable=False) from exc
        raise FetchFailed(f"{shown}: connect failed ({_scrub(exc)})", retryable=True) from exc
    except httpx.DecodingError as exc:
        raise FetchFailed(f"{shown}: undecodable body ({_scrub(exc)})", retryable=False) from exc
    except httpx.TransportError as exc:
        raise FetchFailed(f"{shown}: {type(exc).__name__} ({_scrub(exc)})", retryable=True) from exc


class SafeFetcher:
    """Fetches outside URLs with the SSRF checks of the module docstring."""

    def __init__(
        self,
        allowed_hosts: set[str],
        *,
        allow_http: bool = True,
        http_hosts: set[str] | frozenset[str] = frozenset(),
        max_bytes: int,
        timeout_s: float,
        max_redirects: int = 3,
        resolver: Resolver | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if max_bytes <= 0 or timeout_s <= 0 or max_redirects < 0:
            raise ValueError("max_bytes and timeout_s must be positive, max_redirects not negative")
        self._allowed = frozenset(_allowed_entry(h) for h in allowed_hosts)
        self._schemes = frozenset({"https", "http"} if allow_http else {"https"})
        self._http_hosts = frozenset(_allowed_entry(h) for h in http_hosts)
        self._max_bytes = max_bytes
        self._timeout_s = timeout_s
        self._max_redirects = max_redirects
        self._resolver = resolver or system_resolver
        self._ssl_context = ssl_context or httpx.create_ssl_context()

    @classmethod
    def from_settings(cls, settings: Settings, *, resolver: Resolver | None = None) -> SafeFetcher:
        """The provider-output fetcher: https only, except the hosts configured for plain http
        (``fetch_http_hosts``: the emulator of a dev stack); private addresses only for the
        configured hosts."""
        return cls(
            settings.allowed_fetch_hosts(),
            allow_http=False,
            http_hosts=set(settings.fetch_http_hosts),
            max_bytes=settings.fetch_max_bytes,
            timeout_s=settings.fetch_timeout_s,
            resolver=resolver,
        )

    @contextmanager
    def stream(
        self, url: str, *, domains: Sequence[str] | None = None, expect: BodyExpectation | None = None
    ) -> Iterator[tuple[ResponseMeta, Iterator[bytes]]]:
        """Open a 2xx GET and yield its metadata and decoded body chunks (size and time capped).

        ``domains``: the URL's host must match one (provider output domains). ``expect``: the
        Content-Type and first bytes are checked before any chunk is handed out.
        Raises FetchRefused / FetchFailed (BodyRejected for an unacceptable body), also from the
        chunk iterator.
        """
        if domains is not None:
            self._check_domain(url, domains)
        deadline = time.monotonic() + self._timeout_s
        backend = _PinnedBackend(deadline)
        with _PinnedTransport(backend, self._ssl_context) as transport:
            response, final = self._open(transport, backend, "GET", url, {})
            try:
                shown = redact(str(final))
                if not 200 <= response.status_code < 300:
                    raise self._status_error(response.status_code, shown)
                length = _content_length(response)
                if length is not None and length > self._max_bytes:
                    raise BodyRejected(
                        f"{shown}: Content-Length {length} exceeds {self._max_bytes} bytes", response.status_code
                    )
                try:
                    codings = content_codings(response.headers.get("content-encoding"))
                except EncodingRefused as exc:
                    raise BodyRejected(f"{shown}: {exc}", response.status_code) from exc
                content_type = response.headers.get("content-type")
                if expect is not None:
                    _check_content_type(content_type, expect, shown, response.status_code)
                meta = ResponseMeta(
                    status=response.status_code,
                    content_type=content_type,
                    content_length=length,
                    final_url_redacted=shown,
                )
                chunks = self._chunks(response, shown, codings[0] if codings else None)
                yield meta, _checked_head(chunks, expect, shown) if expect is not None else chunks
            finally:
                response.close()

    def fetch_to(self, url: str, sink: BinaryIO, *, expect: BodyExpectation | None = None) -> FetchResult:
        """Stream the body into ``sink``, hashing as it goes (on a second thread, overlapped with
        the reads: adapters/hashing.py); on error ``sink`` may hold a prefix."""
        size = 0
        with BackgroundSha256() as digest, self.stream(url, expect=expect) as (meta, chunks):
            for chunk in chunks:
                digest.update(chunk)
                sink.write(chunk)
                size += len(chunk)
        log.debug("fetched %s: %d bytes", meta.final_url_redacted, size)
        return FetchResult(
            size=size,
            sha256=digest.hexdigest(),
            content_type=meta.content_type,
            final_url_redacted=meta.final_url_redacted,
            status=meta.status,
        )

    def check(self, url: str) -> UrlCheck:
        """Is the URL reachable? HEAD, or a 1-byte ranged GET where HEAD is 405/501.

        Fetch errors become the result (refusals are not retryable); nothing is read from bodies.
        """
        deadline = time.monotonic() + self._timeout_s
        backend = _PinnedBackend(deadline)
        try:
            with _PinnedTransport(backend, self._ssl_context) as transport:
                response, final = self._open(transport, backend, "HEAD", url, {})
                response.close()
                if response.status_code in (405, 501):
                    response, final = self._open(transport, backend, "GET", url, {"Range": "bytes=0-0"})
                    response.close()  # never read the body: it may be the whole file
        except FetchError as exc:
            log.info("url check failed: %s", exc.reason)
            return UrlCheck(ok=False, status=exc.status, reason=exc.reason, retryable=exc.retryable)
        status = response.status_code
        content_type = response.headers.get("content-type")
        if 200 <= status < 300:
            return UrlCheck(ok=True, status=status, reason="ok", retryable=False, content_type=content_type)
        error = self._status_error(status, redact(str(final)))
        return UrlCheck(
            ok=False, status=status, reason=error.reason, retryable=error.retryable, content_type=content_type
        )

    def check_all(self, urls: Sequence[str], *, concurrency: int = 8) -> list[UrlCheck]:
        """`check` every URL with at most ``concurrency`` in flight; results in input order."""
        with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="url-check") as pool:
            return list(pool.map(self.check, urls))

    def _open(
        self,
        transport: _PinnedTransport,
        backend: _PinnedBackend,
        method: str,
        url: str,
        headers: dict[str, str],
    ) -> tuple[httpx.Response, httpx.URL]:
        """Send, following redirects by hand; every hop is admitted before it is sent."""
        current = url
        for _ in range(self._max_redirects + 1):
            target = self._admit(current, backend)
            shown = redact(str(target))
            request = httpx.Request(
                method,
                target,
                headers={"User-Agent": "reelqueue-fetcher/1", "Accept-Encoding": "identity", **headers},
                # per-operation socket timeouts; _DeadlineStream clamps each to the total deadline
                extensions={"timeout": httpx.Timeout(self._timeout_s).as_dict()},
            )
            quiet = _IN_FETCH.set(True)
            try:
                with _mapped_errors(shown):
                    response = transport.handle_request(request)
            finally:
                _IN_FETCH.reset(quiet)
            response.request = request
            location = response.headers.get("location")
            if response.status_code not in _REDIRECTS or location is None:
                return response, target
            response.close()
            try:
                current = str(target.join(location))
            except (httpx.InvalidURL, ValueError):
                self._refuse(f"{shown}: invalid redirect location")
            log.debug("redirect %s -> %s", shown, redact(current))
        raise FetchFailed(f"{redact(url)}: more than {self._max_redirects} redirects", retryable=False)

    def _admit(self, raw_url: str, backend: _PinnedBackend) -> httpx.URL:
        """Parse and check one hop and pin its host's checked addresses (once per operation)."""
        shown = redact(raw_url)
        try:
            url = httpx.URL(raw_url)
        except (httpx.InvalidURL, TypeError, ValueError):
            self._refuse(f"{shown}: invalid URL")
        if url.scheme not in self._schemes | {"http"}:
            self._refuse(f"{shown}: scheme {url.scheme!r} not allowed")
        if url.userinfo:
            self._refuse(f"{shown}: credentials in URL")
        host = url.raw_host.decode("ascii").lower()
        if not host:
            self._refuse(f"{shown}: no host")
        port = url.port or (443 if url.scheme == "https" else 80)
        if url.scheme not in self._schemes and not {(host, None), (host, port)} & self._http_hosts:
            self._refuse(f"{shown}: plain http is allowed only for configured hosts (https required)")
        if (host, port) not in backend.pins:
            allowed = bool({(host, None), (host, port)} & self._allowed)
            backend.pins[host, port] = self._checked_addresses(host, port, allowed, shown, backend)
        return url

    def _checked_addresses(self, host: str, port: int, allowed: bool, shown: str, backend: _PinnedBackend) -> list[str]:
        literal = _ip_literal(host)
        if literal is None and not allowed and (why := _name_refusal(host)):
            self._refuse(f"{shown}: {why}")
        if literal is not None:
            answers = [str(literal)]
        elif host in backend.answers:
            answers = backend.answers[host]
        else:
            answers = backend.answers[host] = self._resolve(host, port, shown, backend.deadline)
        checked: list[str] = []
        for answer in answers:
            ip = _ip_literal(answer)
            if ip is None:
                self._refuse(f"{shown}: resolver returned {answer!r}, not an address")
            if not allowed and (why := address_refusal(ip)):
                via = "" if literal is not None else f"{host} resolves to "
                self._refuse(f"{shown}: {via}{ip} ({why})")
            checked.append(str(ip))
        return checked

    def _resolve(self, host: str, port: int, shown: str, deadline: float) -> list[str]:
        future = _DNS_POOL.submit(self._resolver, host, port)
        try:
            answers = future.result(timeout=max(0.0, deadline - time.monotonic()))
        except TimeoutError as exc:
            raise FetchFailed(f"{shown}: DNS lookup timed out", retryable=True, dns=True) from exc
        except (OSError, UnicodeError) as exc:
            raise FetchFailed(f"{shown}: DNS lookup failed ({_scrub(exc)})", retryable=True, dns=True) from exc
        if not answers:
            raise FetchFailed(f"{shown}: DNS lookup returned no address", retryable=True, dns=True)
        return answers

    @staticmethod
    def _refuse(reason: str) -> NoReturn:
        log.warning("fetch refused: %s", reason)
        raise FetchRefused(reason)

    def _chunks(self, response: httpx.Response, shown: str, coding: str | None) -> Iterator[bytes]:
        """Raw bytes off the socket, decoded here (bounded) and never by httpx."""
        with _mapped_errors(shown):
            try:
                # raw pieces as read (at most _READ bytes each), not re-chunked by httpx
                yield from decoded_chunks(response.iter_raw(), coding, max_bytes=self._max_bytes, chunk=_CHUNK)
            except BodyTooLarge as exc:
                raise BodyRejected(f"{shown}: {exc}", response.status_code) from exc
            except BodyUndecodable as exc:
                raise BodyRejected(f"{shown}: {exc}", response.status_code) from exc

    @staticmethod
    def _check_domain(url: str, domains: Sequence[str]) -> None:
        """The URL's host is one of `domains` (exact, or under an entry written ``.example.com``)."""
        try:
            host = (urlsplit(url).hostname or "").rstrip(".").lower()
        except ValueError:
            host = ""
        for domain in (d.lower() for d in domains):
            if host == domain.lstrip(".") or (domain.startswith(".") and host.endswith(domain)):
                return
        SafeFetcher._refuse(f"{redact(url)}: host {host!r} is not an output domain of this provider")

    @staticmethod
    def _status_error(status: int, shown: str) -> FetchFailed:
        if status in _REDIRECTS:
            return FetchFailed(f"{shown}: redirect without Location", retryable=False, status=status)
        return FetchFailed(f"{shown}: HTTP {status}", retryable=_retryable_status(status), status=status)


def _check_content_type(content_type: str | None, expect: BodyExpectation, shown: str, status: int) -> None:
    """A declared type must be one `expect` allows; an absent one leaves it to the magic number."""
    if content_type is None:
        return
    media_type = content_type.partition(";")[0].strip().lower()
    if media_type not in expect.content_types:
        raise BodyRejected(f"{shown}: Content-Type {media_type!r} is not a {expect.name}", status)


def _checked_head(chunks: Iterator[bytes], expect: BodyExpectation, shown: str) -> Iterator[bytes]:
    """Hold the first chunks back until `expect.head_bytes` arrived and the magic number matches."""
    head = b""
    for chunk in chunks:
        if len(head) < expect.head_bytes:
            head += chunk
            if len(head) < expect.head_bytes:
                continue
            if not expect.magic(head[: expect.head_bytes]):
                raise BodyRejected(f"{shown}: body does not start like a {expect.name}")
            chunk, head = head, head[: expect.head_bytes]
        yield chunk
    if len(head) < expect.head_bytes:
        raise BodyRejected(f"{shown}: body too short for a {expect.name} ({len(head)} bytes)")


def _allowed_entry(entry: str) -> tuple[str, int | None]:
    """'host', 'host:port', '::1' or '[::1]:port' -> (lowercase host, port or None for any port)."""
    entry = entry.strip().lower()
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else None
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        return host, int(port)
    return entry, None


def _content_length(response: httpx.Response) -> int | None:
    try:
        return int(response.headers["content-length"])
    except (KeyError, ValueError):
        return None
