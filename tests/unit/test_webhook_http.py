"""The gateway's HTTP layer for webhooks: refusals as problem+json, before any database work.

The app is built with real parts: the emulator adapter verifies, the database handle points at a
port where nothing listens (only the last test reaches it), and the Temporal signaler would fail
the test if anything tried to signal.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient

from adapters.providers.emulator import EmulatorProvider
from adapters.providers.emulator_api import JobOut
from emulator.config import new_webhook_secret
from emulator.signing import webhook_headers
from gateway.app import create_app
from gateway.deps import GatewayDeps
from gateway.signals import TemporalSignaler, signal_request_id
from schema.db import Database

SECRET = new_webhook_secret()
LIMIT = 4096
NOWHERE_DB = "postgresql+psycopg://nobody@127.0.0.1:1/nothing?connect_timeout=2"


async def _no_temporal():  # noqa: ANN202
    raise AssertionError("a refused webhook must not reach Temporal")


@pytest.fixture(scope="module")
def client() -> TestClient:
    deps = GatewayDeps(
        db=Database(NOWHERE_DB),
        providers={"emulator": EmulatorProvider("http://127.0.0.1:9", "key", webhook_secret=SECRET)},
        signaler=TemporalSignaler(_no_temporal),
        max_body_bytes=LIMIT,
    )
    return TestClient(create_app(deps))


def job_body() -> bytes:
    now = datetime.now(UTC)
    return JobOut(id="job_http", request_key="t-a1", model="m", aspect_ratio="1:1", duration_s=2.0,
                  status="queued", progress=0.0, created_at=now, updated_at=now).model_dump_json().encode()


def post(client: TestClient, body: bytes, headers: dict[str, str], provider: str = "emulator"):  # noqa: ANN201
    return client.post(f"/webhooks/{provider}", content=body, headers={"content-type": "application/json",
                                                                       **headers})


def assert_problem(resp, status: int) -> dict:  # noqa: ANN001
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"] == "application/problem+json"
    problem = resp.json()
    assert problem["status"] == status and problem["title"] and problem["type"] and problem["detail"]
    text = resp.text
    for secret_part in (SECRET, SECRET.removeprefix("whsec_"), "nobody@", "127.0.0.1:1", "Traceback"):
        assert secret_part not in text
    return problem


def test_healthz_answers_without_any_dependency() -> None:
    def broken() -> GatewayDeps:
        raise AssertionError("healthz must not build the dependencies")

    assert TestClient(create_app(broken)).get("/healthz").json() == {"ok": True}


def test_unknown_provider_is_404(client: TestClient) -> None:
    body = job_body()
    problem = assert_problem(post(client, body, webhook_headers(SECRET, "msg_x", body), provider="runway"), 404)
    assert problem["type"] == "urn:reelqueue:problem:unknown-provider"


def test_a_body_over_the_limit_is_413(client: TestClient) -> None:
    body = b"x" * (LIMIT + 1)
    assert_problem(post(client, body, webhook_headers(SECRET, "msg_big", body)), 413)

    def chunks():  # noqa: ANN202 - no content-length: the limit holds while streaming
        for _ in range(LIMIT // 512 + 2):
            yield b"y" * 512

    assert_problem(client.post("/webhooks/emulator", content=chunks()), 413)


def test_a_forged_signature_is_401_and_tells_nothing_secret(client: TestClient) -> None:
    body = job_body()
    headers = webhook_headers(new_webhook_secret(), "msg_forged", body)
    problem = assert_problem(post(client, body, headers), 401)
    assert problem["type"] == "urn:reelqueue:problem:webhook-not-verified"
    assert headers["webhook-signature"].removeprefix("v1,") not in json.dumps(problem)
    assert "job_http" not in json.dumps(problem)  # nothing of the body either


@pytest.mark.parametrize("age_s", [600, -600])
def test_a_stale_or_future_timestamp_is_401(client: TestClient, age_s: int) -> None:
    body = job_body()
    assert_problem(post(client, body, webhook_headers(SECRET, "msg_old", body, ts=int(time.time()) - age_s)), 401)


def test_missing_signature_headers_are_401(client: TestClient) -> None:
    assert_problem(post(client, job_body(), {}), 401)


def test_a_signed_body_that_is_not_a_job_is_400(client: TestClient) -> None:
    body = b'{"not": "a job"}'
    problem = assert_problem(post(client, body, webhook_headers(SECRET, "msg_odd", body)), 400)
    assert problem["type"] == "urn:reelqueue:problem:malformed-webhook"


def test_other_methods_answer_problem_json(client: TestClient) -> None:
    resp = client.get("/webhooks/emulator")
    assert resp.status_code == 405 and resp.headers["content-type"] == "application/problem+json"
    assert resp.json() == {"type": "about:blank", "title": "Method Not Allowed", "status": 405}


def test_a_verified_event_the_database_cannot_take_is_503_to_retry(client: TestClient) -> None:
    body = job_body()
    resp = post(client, body, webhook_headers(SECRET, "msg_nodb", body))
    problem = assert_problem(resp, 503)
    assert resp.headers["retry-after"] and "again later" in problem["detail"]


def test_signal_request_ids_are_one_per_event() -> None:
    assert signal_request_id("emulator", "msg_1") == signal_request_id("emulator", "msg_1")
    assert signal_request_id("emulator", "msg_1") != signal_request_id("emulator", "msg_2")
    assert signal_request_id("emulator", "msg_1") != signal_request_id("fal", "msg_1")
