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


def test_every_answer_carries_a_request_id_and_a_sane_one_is_kept(client: TestClient) -> None:
    mine = client.get("/v1/me", headers={"X-Request-ID": "client-42"})
    assert mine.headers["x-request-id"] == "client-42"
    fresh = client.get("/v1/me", headers={"X-Request-ID": "bad id\twith blanks"})
    assert len(fresh.headers["x-request-id"]) == 32 and fresh.headers["x-request-id"] != mine.headers["x-request-id"]
    assert client.get("/healthz").headers["x-request-id"]


def test_a_v1_body_over_the_api_cap_is_413_before_the_key_is_checked(client: TestClient) -> None:
    resp = client.post("/v1/generations", content=b"{" + b" " * (64 * 1024) + b"}",
                       headers={"content-type": "application/json"})
    assert resp.status_code == 413, resp.text
    assert resp.json()["type"] == "urn:reelqueue:problem:body-too-large"
    assert resp.headers["x-request-id"]


def test_the_openapi_document_declares_the_bearer_key_and_the_idempotency_header(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    create = spec["paths"]["/v1/generations"]["post"]
    assert any(p["name"] == "Idempotency-Key" and p["in"] == "header" for p in create["parameters"])


def test_equal_requests_hash_equal_and_different_ones_do_not() -> None:
    from control.generations import GenerationBody

    base = GenerationBody(prompt="A lamp on a desk", image_asset_id="a1", duration_s=2)
    same = GenerationBody(prompt="  A lamp\n on   a desk ", image_asset_id="a1", duration_s=2.0001)
    assert same.sha256() == base.sha256() and same.duration_s == 2.0
    for change in ({"prompt": "A lamp on a table"}, {"duration_s": 3}, {"aspect_ratio": "1:1"},
                   {"image_asset_id": "a2"}, {"model": "other"}):
        assert base.model_copy(update=change).sha256() != base.sha256(), change
    with pytest.raises(ValueError):
        GenerationBody(prompt="p", image_asset_id="a1", duration_s=0.0001)
