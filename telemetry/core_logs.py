"""The SDK core's own log (its Rust side: client retries while Temporal restarts, worker warnings)
goes through Python logging as `temporalio.core`, to stderr with every other log line. Left to
itself the core prints to stdout, where a `--json` report or a script's parsed output goes.

Every process gets this through the default Runtime: `metrics.sdk.install` (worker, gateway) builds
its Runtime with `core_logging()`, and `adapters.temporal_client.connect` makes a plain one the
default before the first client when nothing else did.
"""

from __future__ import annotations

import dataclasses
import logging

from temporalio.runtime import LogForwardingConfig, LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter

CORE_LOGGER = logging.getLogger("temporalio.core")
_default: Runtime | None = None


def core_logging() -> LoggingConfig:
    """The core's warnings and errors, forwarded to CORE_LOGGER (the SDK's default levels)."""
    return LoggingConfig(filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
                         forwarding=LogForwardingConfig(logger=CORE_LOGGER))


def default_runtime(telemetry: TelemetryConfig | None = None) -> Runtime:
    """The process's default Runtime with the core's log forwarded, made on the first call (that
    caller's telemetry, e.g. a metrics buffer, wins; later calls return it). Clients connected
    before it keep the runtime they had."""
    global _default
    if _default is None:
        _default = Runtime(telemetry=dataclasses.replace(telemetry or TelemetryConfig(), logging=core_logging()))
        Runtime.set_default(_default, error_if_already_set=False)
    return _default
