"""Tenants and API keys: `reelqueue tenants ...` against the real Postgres, and the keys at the
gateway's /v1 door (401 problem+json, rotation, revocation, the request rate)."""

from __future__ import annotations

import hashlib
import uuid

import httpx
import pytest
from cli_helpers import run_cli
from fastapi.testclient import TestClient
from sqlalchemy import select, text
from stack_helpers import gateway_log_after

from config.settings import Settings
from gateway.app import create_app
from gateway.deps import GatewayDeps
from reelqueue_client import ApiProblem, ReelqueueClient
from schema.db import Database
from schema.models import ApiKey


def new_tenant(*options: str) -> dict:
    name = f"t-{uuid.uuid4().hex[:10]}"
    created = run_cli("tenants", "create", name, *options, "--json")
    assert created.code == 0, created.stdout + created.stderr
    return created.json


@pytest.fixture(scope="module")
def http(stack: Settings) -> TestClient:
    app = create_app(GatewayDeps(db=Database(stack.database_url), providers={}, signaler=None), settings=stack)
    return TestClient(app)


def api(http: TestClient, key: str) -> ReelqueueClient:
    return ReelqueueClient("", key, http=http)


def test_create_prints_the_key_once_and_stores_only_its_hash(stack: Settings, http: TestClient) -> None:
    created = new_tenant("--credits", "50", "--max-concurrent", "2", "--rate-per-minute", "100")
    key = created["api_key"]
    assert key.startswith("rq_") and len(key) > 40
    assert (created["credits"], created["max_concurrent"], created["rate_per_minute"]) == (50, 2, 100)
    with Database(stack.database_url).transaction() as session:
        row = session.scalar(select(ApiKey).where(ApiKey.id == created["key_id"]))
        dumped = session.execute(text("SELECT row_to_json(k)::text FROM api_keys k WHERE id = :id"),
                                 {"id": created["key_id"]}).scalar_one()
    assert row.key_sha256 == hashlib.sha256(key.encode()).hexdigest()
    assert key not in dumped and key[len(row.prefix):] not in dumped

    me = api(http, key).me()
    assert (me.tenant_id, me.key_id) == (created["tenant_id"], created["key_id"])
    assert (me.credit_limit, me.credit_available, me.max_concurrent) == (50, 50, 2)

    listed = run_cli("tenants", "keys", "list", created["tenant_id"], "--json").json["keys"]
    assert [k["key_id"] for k in listed] == [created["key_id"]]
    assert "api_key" not in listed[0] and key not in str(listed)

    again = run_cli("tenants", "create", created["tenant_id"], "--json")
    assert again.code == 2 and "exists" in again.json["error"]


@pytest.mark.parametrize("authorization", [None, "Basic abc", "Bearer ", "Bearer rq_not-a-key", "Bearer sk_x"])
def test_a_missing_or_unknown_key_is_401_problem_json(http: TestClient, authorization: str | None) -> None:
    headers = {"Authorization": authorization} if authorization is not None else {}
    resp = http.get("/v1/me", headers=headers)
    assert resp.status_code == 401
    assert resp.headers["content-type"] == "application/problem+json"
    assert resp.headers["www-authenticate"] == "Bearer"
    assert resp.json()["type"] == "urn:reelqueue:problem:unauthorized"


def test_rotate_and_revoke(http: TestClient) -> None:
    created = new_tenant()
    second = run_cli("tenants", "keys", "create", created["tenant_id"], "--json").json
    rotated = run_cli("tenants", "keys", "rotate", created["key_id"], "--json").json
    assert rotated["revoked"] == created["key_id"] and rotated["tenant_id"] == created["tenant_id"]
    with pytest.raises(ApiProblem) as refused:
        api(http, created["api_key"]).me()
    assert refused.value.status == 401
    assert api(http, rotated["api_key"]).me().key_id == rotated["key_id"]
    assert api(http, second["api_key"]).me().key_id == second["key_id"]

    revoked = run_cli("tenants", "keys", "revoke", second["key_id"], "--json")
    assert revoked.code == 0 and revoked.json["revoked_at"]
    with pytest.raises(ApiProblem):
        api(http, second["api_key"]).me()
    listed = {k["key_id"]: k for k in run_cli("tenants", "keys", "list", created["tenant_id"], "--json").json["keys"]}
    assert listed[created["key_id"]]["revoked_at"] and listed[second["key_id"]]["revoked_at"]
    assert listed[rotated["key_id"]]["revoked_at"] is None
    assert run_cli("tenants", "keys", "revoke", "key_nope", "--json").code == 2


def _window_of(stack: Settings, tenant_id: str):  # noqa: ANN202 - a datetime
    with Database(stack.database_url).transaction() as session:
        return session.scalar(text("SELECT window_start FROM tenant_rate_windows WHERE tenant_id = :t"),
                              {"t": tenant_id})


def test_over_the_rate_is_429_with_retry_after(http: TestClient, stack: Settings) -> None:
    """Four calls at 3 a minute: the fourth is refused. The window is a calendar minute, so the calls
    are made again (a fresh tenant) when a minute began between the first and the fourth."""
    for _ in range(3):
        created = new_tenant("--rate-per-minute", "3")
        client = api(http, created["api_key"])
        client.me()
        first = _window_of(stack, created["tenant_id"])
        client.me()
        client.me()
        try:
            client.me()
        except ApiProblem as exc:
            limited = exc
        else:
            limited = None
        if _window_of(stack, created["tenant_id"]) == first:
            break
    assert limited is not None and limited.status == 429 and limited.slug == "rate-limited", limited
    assert 1 <= int(limited.headers["retry-after"]) <= 60
    other = new_tenant("--rate-per-minute", "3")  # another tenant's budget is its own
    assert api(http, other["api_key"]).me().tenant_id == other["tenant_id"]


def test_the_request_id_of_an_answer_is_in_the_gateway_log(stack: Settings) -> None:
    """The `dev up` gateway process: the id it answers with is on the request's line of its log."""
    marker = f"probe-{uuid.uuid4().hex[:12]}"
    resp = httpx.get(f"{stack.gateway_url}/v1/me", headers={"X-Request-ID": marker}, timeout=10)
    assert resp.status_code == 401 and resp.headers["x-request-id"] == marker
    lines = [line for line in gateway_log_after(stack, marker, also="GET /v1/me 401").splitlines() if marker in line]
    assert any("GET /v1/me 401" in line for line in lines), lines  # the request line (uvicorn's carries the id too)
