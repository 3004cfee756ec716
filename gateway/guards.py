"""What every request passes: tokens kept out of the access log, a cap on request bodies, the
/metrics guard (docs/security.md, "Gateway")."""

from __future__ import annotations

import hmac
import ipaddress
import logging
from collections.abc import Callable

from fastapi import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.problems import ProblemError, problem_response
from telemetry.redaction import REDACTED, redact

__all__ = ["REDACTED", "redact", "RedactTokens", "install_log_redaction", "BodyLimit", "read_body",
           "check_metrics_access"]
ACCESS_LOGGER = "uvicorn.access"


class RedactTokens(logging.Filter):
    """Rewrites uvicorn's access-log record (its path argument) before any handler formats it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        elif isinstance(record.msg, str):
            record.msg = redact(record.msg)
        return True


def install_log_redaction() -> None:
    """Once per process: uvicorn configures its loggers before it imports the app, so this sticks."""
    logger = logging.getLogger(ACCESS_LOGGER)
    if not any(isinstance(f, RedactTokens) for f in logger.filters):
        logger.addFilter(RedactTokens())


class BodyLimit:
    """ASGI middleware: 413 for a body over its cap, by its Content-Length or, for a chunked body
    (none), by reading it ahead up to the cap. The cap is `max_bytes`, or lower where `lower_cap`
    says so for a request (the tenant API's)."""

    def __init__(self, app: ASGIApp, max_bytes: int, lower_cap: Callable[[Scope], int | None] | None = None):
        self.app = app
        self.max_bytes = max_bytes
        self.lower_cap = lower_cap

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        lower = self.lower_cap(scope) if self.lower_cap is not None else None
        cap = self.max_bytes if lower is None else min(lower, self.max_bytes)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is None:  # chunked: read here (at most the cap), so that a 413 is answered by us
            receive = await _buffered(receive, cap)
            if receive is None:
                await problem_response(_too_large(cap).problem)(scope, _nothing, send)
                return
        elif not declared.isdigit() or int(declared) > cap:  # the server delivers no more than declared
            await problem_response(_too_large(cap).problem)(scope, receive, send)
            return
        await self.app(scope, receive, send)


async def _buffered(receive: Receive, cap: int) -> Receive | None:
    """The whole body read ahead and handed on as one message; None once it passes `cap` (the rest
    is not read)."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client left mid-body: the app sees just that
            return _replaying(message, receive)
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        if size > cap:
            return None
        if not message.get("more_body", False):
            return _replaying({"type": "http.request", "body": b"".join(chunks), "more_body": False}, receive)


def _replaying(first: Message, receive: Receive) -> Receive:
    pending = [first]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay


async def _nothing() -> Message:
    return {"type": "http.disconnect"}


def _too_large(cap: int) -> ProblemError:
    return ProblemError(413, f"request bodies are limited to {cap} bytes", slug="body-too-large")


async def read_body(request: Request, limit: int, *, what: str = "request bodies",
                    slug: str = "body-too-large") -> bytes:
    """The raw body, refused (413) past `limit` bytes without reading the rest; a route reads it only
    once the caller is authenticated."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ProblemError(413, f"{what} are limited to {limit} bytes", slug=slug)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ProblemError(413, f"{what} are limited to {limit} bytes", slug=slug)
        chunks.append(chunk)
    return b"".join(chunks)


def check_metrics_access(request: Request, token: str) -> None:
    """With a token: `Authorization: Bearer <token>` only. Without: loopback clients only."""
    if token:
        sent = request.headers.get("authorization", "")
        scheme, _, value = sent.partition(" ")
        if scheme.lower() != "bearer" or not value.isascii() or not hmac.compare_digest(value.encode(), token.encode()):
            raise ProblemError(401, "a bearer token is required for /metrics", slug="metrics-token",
                               headers={"WWW-Authenticate": "Bearer"})
        return
    host = request.client.host if request.client else ""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ProblemError(403, "/metrics answers loopback clients only unless REELQUEUE_METRICS_TOKEN is set",
                           slug="metrics-forbidden")
