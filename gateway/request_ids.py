"""Every response carries `X-Request-ID` (the caller's, when it sent a sane one, else a new one),
and the gateway logs one line per request with it, so a client's report finds the server's log."""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from contextvars import ContextVar

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.guards import redact
from telemetry import logs

HEADER = "X-Request-ID"
_SANE = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
log = logging.getLogger("reelqueue.gateway.requests")
current: ContextVar[str] = ContextVar("request_id", default="-")


class RequestIds:
    """ASGI middleware (outermost): sets the id before anything answers, even a refusal."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        sent = dict(scope["headers"]).get(HEADER.lower().encode(), b"").decode("latin-1")
        request_id = sent if _SANE.match(sent) else uuid.uuid4().hex
        token = current.set(request_id)
        started, status = time.monotonic(), 0

        async def with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []), (HEADER.lower().encode(), request_id.encode())]
            await send(message)

        try:
            with logs.bound(request_id=request_id):
                await self.app(scope, receive, with_id)
        finally:
            # the path only, media tokens redacted (as in the access log, gateway/guards.py)
            path = _printable(redact(scope["path"]))
            log.info("request_id=%s %s %s %d %.1fms", request_id, scope["method"], path, status,
                     (time.monotonic() - started) * 1000, extra={"fields": {"request_id": request_id}})
            current.reset(token)


def _printable(path: str) -> str:
    """A decoded path may hold any character: escaped, so that a line of the log stays one line."""
    return json.dumps(path)[1:-1]


def install_request_log() -> None:
    """Once per process: the request lines go to stderr (the gateway's log under `dev up`), beside
    uvicorn's own, whatever logging the host process set up; under telemetry/logs.py's handler they
    go through it instead."""
    if logs.is_configured():
        log.setLevel(logging.INFO)
        return
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
