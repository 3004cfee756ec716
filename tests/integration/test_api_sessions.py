"""Browser sessions (`/v1/sessions`) against the real Postgres: a key issues a short-lived token
that works wherever the key does, never issues another, and ends at sign-out, at expiry and when
its key is revoked; only the token's hash is stored. The bucket's CORS rules that `dev up` set."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from cli_helpers import run_cli
from fastapi.testclient import TestClient
from sqlalchemy import text, update
from test_api_tenants import new_tenant

from adapters.storage import ObjectStorage
from config.settings import Settings
from gateway.app import create_app
from gateway.deps import GatewayDeps
from schema.db import Database
from schema.models import BrowserSession

PROBLEM = "urn:reelqueue:problem:"


@pytest.fixture(scope="module")
def http(stack: Settings) -> TestClient:
    app = create_app(GatewayDeps(db=Database(stack.database_url), providers={}, signaler=None), settings=stack)
    return TestClient(app)


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _session(http: TestClient, key: str, **body: int) -> dict:
    answer = http.post("/v1/sessions", headers=_bearer(key), json=body or None)
    assert answer.status_code == 201, answer.text
    assert answer.headers["cache-control"] == "no-store"
    return answer.json()


def _refusal(answer: httpx.Response) -> tuple[int, str]:
    return answer.status_code, answer.json()["type"].removeprefix(PROBLEM)


def test_a_key_issues_a_token_that_works_like_it_until_sign_out(stack: Settings, http: TestClient) -> None:
    tenant = new_tenant()
    made = _session(http, tenant["api_key"])
    token = made["token"]
    assert token.startswith("rqs_") and (made["tenant_id"], made["key_id"]) == (tenant["tenant_id"], tenant["key_id"])
    lives = datetime.fromisoformat(made["expires_at"]) - datetime.now(UTC)
    assert timedelta(minutes=59) < lives <= timedelta(hours=1)
    me = http.get("/v1/me", headers=_bearer(token))
    assert me.status_code == 200 and me.json()["tenant_id"] == tenant["tenant_id"]
    with Database(stack.database_url).transaction() as session:
        dumped = session.execute(text("SELECT string_agg(row_to_json(s)::text, '') FROM browser_sessions s "
                                      "WHERE key_id = :k"), {"k": tenant["key_id"]}).scalar_one()
    assert hashlib.sha256(token.encode()).hexdigest() in dumped and token not in dumped

    assert _refusal(http.post("/v1/sessions", headers=_bearer(token))) == (403, "session-from-session")
    assert _refusal(http.post("/v1/sessions", headers=_bearer(tenant["api_key"]), json={"ttl_s": 59})) == (
        400, "invalid-request")
    assert _refusal(http.delete("/v1/sessions/current", headers=_bearer(tenant["api_key"]))) == (400, "not-a-session")
    assert http.delete("/v1/sessions/current", headers=_bearer(token)).status_code == 204
    ended = http.get("/v1/me", headers=_bearer(token))
    assert _refusal(ended) == (401, "unauthorized") and "sign in again" in ended.json()["detail"]
    assert http.get("/v1/me", headers=_bearer(tenant["api_key"])).status_code == 200  # the key lives on


def test_a_token_ends_at_expiry_and_with_its_key(stack: Settings, http: TestClient) -> None:
    tenant = new_tenant()
    short = _session(http, tenant["api_key"], ttl_s=60)["token"]
    other = _session(http, tenant["api_key"])["token"]
    assert http.get("/v1/me", headers=_bearer(short)).status_code == 200
    with Database(stack.database_url).transaction() as session:
        session.execute(update(BrowserSession).where(BrowserSession.token_sha256 == hashlib.sha256(
            short.encode()).hexdigest()).values(expires_at=datetime.now(UTC) - timedelta(seconds=1)))
    assert _refusal(http.get("/v1/me", headers=_bearer(short))) == (401, "unauthorized")
    assert http.get("/v1/me", headers=_bearer(other)).status_code == 200
    revoked = run_cli("tenants", "keys", "revoke", tenant["key_id"], "--json")
    assert revoked.code == 0, revoked.stdout
    assert _refusal(http.get("/v1/me", headers=_bearer(other))) == (401, "unauthorized")
    assert _refusal(http.get("/v1/me", headers=_bearer("rqs_" + "x" * 43))) == (401, "unauthorized")


def test_dev_up_lets_only_the_gateway_origin_put_to_the_bucket(stack: Settings) -> None:
    """Preflights of a presigned PUT as a browser sends them: the gateway's origin (and its
    localhost twin) may PUT with Content-Type and read ETag; another origin, method or header may not."""
    from adapters.storage_cors import browser_origins

    url, _ = ObjectStorage.from_settings(stack).presigned_put("tenants/x/uploads/quarantine/probe",
                                                              timedelta(minutes=1), size=0, sha256="00" * 32)

    def preflight(origin: str, method: str = "PUT",
                  headers: str = "content-type,x-amz-checksum-sha256") -> httpx.Response:
        return httpx.options(url, timeout=10, headers={"Origin": origin, "Access-Control-Request-Method": method,
                                                       "Access-Control-Request-Headers": headers})

    origins = browser_origins(stack.gateway_url)
    assert origins == [stack.gateway_url, stack.gateway_url.replace("127.0.0.1", "localhost")]
    for origin in origins:
        allowed = preflight(origin)
        assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == origin
        assert allowed.headers["access-control-allow-methods"] == "PUT"
        assert {h.strip() for h in allowed.headers["access-control-allow-headers"].lower().split(",")} == {
            "content-type", "x-amz-checksum-sha256"}
        assert allowed.headers["access-control-expose-headers"] == "ETag"
    assert "access-control-allow-origin" not in preflight("https://evil.example").headers
    # Another method or header: not allowed back, so the browser refuses the request.
    assert "DELETE" not in preflight(stack.gateway_url, "DELETE").headers.get("access-control-allow-methods", "")
    assert "x-amz-acl" not in preflight(stack.gateway_url, headers="content-type,x-amz-acl").headers.get(
        "access-control-allow-headers", "")
