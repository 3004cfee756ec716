"""`python -m emulator`: serve the provider emulator with uvicorn."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import uvicorn

from emulator.app import create_app
from emulator.config import WEBHOOK_SECRET_ENV, EmulatorConfig
from telemetry.logs import configure_logging


def parse_args(argv: list[str] | None = None) -> EmulatorConfig:
    defaults = EmulatorConfig()
    p = argparse.ArgumentParser(prog="python -m emulator", description="reelqueue video provider emulator")
    p.add_argument("--host", default=defaults.host)
    p.add_argument("--port", type=int, default=defaults.port)
    p.add_argument("--data-dir", type=Path, default=defaults.data_dir, help="sqlite jobs + rendered files")
    p.add_argument("--job-seconds", type=float, default=defaults.job_seconds, help="time a job runs")
    p.add_argument("--job-jitter", type=float, default=defaults.job_jitter, help="job time x [1-J, 1+J]")
    p.add_argument("--max-running", type=int, default=defaults.max_running, help="jobs running at once")
    p.add_argument("--max-queued", type=int, default=defaults.max_queued, help="waiting jobs before 429")
    p.add_argument("--render", choices=["full", "fast"], default=defaults.render, help="clip size and frame rate")
    p.add_argument("--render-workers", type=int, default=defaults.render_workers, help="ffmpeg renders at once")
    p.add_argument(
        "--render-cache",
        dest="render_cache_max",
        type=int,
        default=defaults.render_cache_max,
        help="clips kept in DATA_DIR/cache (0: off)",
    )
    p.add_argument("--public-url", default=None, help="base of output URLs (default http://HOST:PORT)")
    p.add_argument("--webhook-secret", default=os.environ.get(WEBHOOK_SECRET_ENV) or None,
                   help=f"whsec_... (default: ${WEBHOOK_SECRET_ENV}, else random per process; the variable "
                        "keeps the secret off the command line)")
    p.add_argument("--price-per-second", type=float, default=defaults.price_per_second)
    p.add_argument("--url-ttl-s", type=float, default=defaults.url_ttl_s, help="output URL lifetime")
    args = vars(p.parse_args(argv))
    return EmulatorConfig(**{k: v for k, v in args.items() if v is not None})


def main(argv: list[str] | None = None) -> None:
    config = parse_args(argv)
    # The worker's and gateway's log lines (telemetry/logs.py): presigned input URLs and output
    # tokens in its request lines are redacted like theirs.
    configure_logging("emulator", os.environ.get("REELQUEUE_LOG_FORMAT", "json"))  # type: ignore[arg-type]
    uvicorn.run(create_app(config), host=config.host, port=config.port, timeout_graceful_shutdown=5,
                log_config=None)


if __name__ == "__main__":
    main()
