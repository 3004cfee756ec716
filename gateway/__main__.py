"""`python -m gateway --host H --port P` (or `reelqueue-gateway`): the gateway under uvicorn, once its
secrets are checked (exit 2). One process, one event loop: it holds up to about 10,000 open event
streams (docs/performance.md, "Live status at scale"); a host runs one per core behind its load
balancer. On SIGTERM its event streams end at once, so their clients resume on another gateway with
Last-Event-ID, while other requests get uvicorn's graceful shutdown."""

from __future__ import annotations

import argparse
import resource
import sys
from typing import Any

import uvicorn

from config.secrets import require
from config.settings import Settings


def main() -> None:
    # `python -m gateway` or the `reelqueue-gateway` console script
    parser = argparse.ArgumentParser(prog="python -m gateway" if sys.argv[0].endswith("__main__.py") else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    settings = Settings()
    require(settings, "gateway")
    from metrics import sdk
    from telemetry.logs import configure_logging
    from telemetry.tracing import setup_tracing

    configure_logging("gateway", settings.log_format, level=settings.log_level, settings=settings)
    setup_tracing("gateway")
    sdk.install()  # its Temporal client's request metrics join the gateway's /metrics
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # a socket per open stream
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))
    from gateway.app import app

    _Server(uvicorn.Config(app, host=args.host, port=args.port, log_config=None)).run()


class _Server(uvicorn.Server):
    """uvicorn waits for open responses at shutdown: the event streams are ended first."""

    async def shutdown(self, sockets: Any = None) -> None:  # noqa: ANN401 - uvicorn's sockets
        state = self.config.app.state
        state.events_stopping = True  # a stream asked for from now on is refused (503), not held
        hub = getattr(state, "event_hub", None)
        if hub is not None:
            hub.end_all("shutdown")
        await super().shutdown(sockets)


if __name__ == "__main__":
    main()
