"""The /v1 door without services: refusals answer problem+json before any database work, and a
database that cannot be reached answers 503 (nothing is written)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from gateway.app import create_app
from gateway.deps import GatewayDeps
from schema.db import Database

NOWHERE_DB = "postgresql+psycopg://nobody@127.0.0.1:1/nothing?connect_timeout=2"


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(GatewayDeps(db=Database(NOWHERE_DB), providers={}, signaler=None)))


def test_no_key_is_401_without_touching_the_database(client: TestClient) -> None:
    resp = client.get("/v1/me")
    assert resp.status_code == 401, resp.text
    assert resp.headers["content-type"] == "application/problem+json"
    assert resp.json()["type"] == "urn:reelqueue:problem:unauthorized"


def test_database_unreachable_is_503_problem(client: TestClient) -> None:
    resp = client.get("/v1/me", headers={"Authorization": "Bearer rq_" + "x" * 43})
    assert resp.status_code == 503, resp.text
    assert resp.headers["content-type"] == "application/problem+json"
    assert resp.json()["type"] == "urn:reelqueue:problem:database-unavailable"
    assert resp.headers["retry-after"]
