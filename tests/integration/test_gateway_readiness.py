"""The gateway's readiness (/readyz, the Kubernetes readiness probe) on the real stack: ready when its
Postgres and its Temporal namespace answer, 503 naming the one that does not; /healthz stays up."""

from __future__ import annotations

import socket

from fastapi.testclient import TestClient

from config.settings import Settings
from gateway.app import create_app
from gateway.deps import deps_from_settings

NOWHERE_DB = "postgresql+psycopg://nobody@127.0.0.1:1/nothing?connect_timeout=2"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _readyz(settings: Settings) -> tuple[int, dict]:
    with TestClient(create_app(deps_from_settings(settings), settings=settings)) as http:
        assert http.get("/healthz").status_code == 200
        answer = http.get("/readyz")
        return answer.status_code, answer.json()


def test_ready_when_the_database_and_the_namespace_answer(stack: Settings) -> None:
    assert _readyz(stack) == (200, {"ready": True, "database": True, "temporal": True, "failed": {}})


def test_not_ready_without_the_database(stack: Settings) -> None:
    code, body = _readyz(stack.model_copy(update={"database_url": NOWHERE_DB}))
    assert (code, body["database"], body["temporal"]) == (503, False, True)
    assert "nobody" not in str(body) and "127.0.0.1:1" not in str(body)  # kinds only, no connection details


def test_not_ready_without_temporal_or_its_namespace(stack: Settings) -> None:
    code, body = _readyz(stack.model_copy(update={"temporal_address": f"127.0.0.1:{_free_port()}"}))
    assert (code, body["database"], body["temporal"]) == (503, True, False)
    code, body = _readyz(stack.model_copy(update={"temporal_namespace": "no-such-namespace"}))
    assert (code, body["temporal"], body["failed"]) == (503, False, {"temporal": "RPCError"})
