"""`python -m gateway --host H --port P`: the gateway under uvicorn, once its secrets are checked (exit 2)."""

from __future__ import annotations

import argparse

import uvicorn

from config.secrets import require
from config.settings import Settings


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m gateway")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    require(Settings(), "gateway")
    uvicorn.run("gateway.app:app", host=args.host, port=args.port)


if __name__ == "__main__":
    main()
