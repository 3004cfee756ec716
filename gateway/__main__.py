"""`python -m gateway --host H --port P` (or `reelqueue-gateway`): the gateway under uvicorn, once its
secrets are checked (exit 2)."""

from __future__ import annotations

import argparse
import sys

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
    uvicorn.run("gateway.app:app", host=args.host, port=args.port, log_config=None)


if __name__ == "__main__":
    main()
