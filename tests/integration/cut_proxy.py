"""An HTTP forward proxy for a browser under test, whose `cut()` is a network cut: every open
connection (a live event stream too) is dropped at once and new ones are refused until `restore()`.

One request per connection (sent upstream with `Connection: close`), response bytes passed on as
they arrive, so streams stay streams. Plain HTTP only, loopback only: for tests.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

HOP_BY_HOP = {"connection", "proxy-connection", "keep-alive", "proxy-authorization"}


class CuttableProxy:
    def __init__(self) -> None:
        self.port = 0
        self.down = False
        self.refused = 0  # connections refused while cut
        self._open: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> CuttableProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_: object) -> None:
        self.cut()
        self._server.close()
        await self._server.wait_closed()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cut(self) -> None:
        self.down = True
        for writer in list(self._open):
            writer.transport.abort()
        self._open.clear()

    def restore(self) -> None:
        self.down = False

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.down:
            self.refused += 1
            writer.transport.abort()
            return
        self._open.add(writer)
        upstream: asyncio.StreamWriter | None = None
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            line, *headers = [h for h in head.split("\r\n") if h]
            method, target, version = line.split(" ")
            url = urlsplit(target)
            kept = [h for h in headers if h.partition(":")[0].strip().lower() not in HOP_BY_HOP]
            length = next((int(h.partition(":")[2]) for h in headers
                           if h.partition(":")[0].strip().lower() == "content-length"), 0)
            body = await reader.readexactly(length) if length else b""
            up_reader, upstream = await asyncio.open_connection(url.hostname, url.port or 80)
            self._open.add(upstream)
            path = url.path + (f"?{url.query}" if url.query else "")
            request = "\r\n".join([f"{method} {path} {version}", *kept, "Connection: close", "", ""])
            upstream.write(request.encode("latin-1") + body)
            while chunk := await up_reader.read(65536):
                writer.write(chunk)
                await writer.drain()
        except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # a cut, or the browser went away: both sides are closed below
        finally:
            for side in (writer, upstream):
                if side is not None:
                    self._open.discard(side)
                    side.close()
