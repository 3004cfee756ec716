"""The worker's /metrics: prometheus_client's small HTTP server on a loopback port (a thread)."""

from __future__ import annotations

import logging

from prometheus_client import start_http_server

log = logging.getLogger("worker.metrics")


def serve_metrics(host: str, port: int) -> str | None:
    """Serve the default registry at http://host:port/metrics; None when off (port 0) or the port is
    taken (another worker on this host): metrics never stop a worker from working."""
    if port <= 0:
        return None
    try:
        start_http_server(port, addr=host)
    except OSError as exc:
        log.warning("metrics not served on %s:%d: %s", host, port, exc)
        return None
    return f"http://{host}:{port}/metrics"
