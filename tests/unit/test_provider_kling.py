"""Kling: the contract fixtures (tests/fixtures/providers/kling, Kling's API reference examples)
against the adapter and the emulator's dialect; the adapter on the dialect; its JWT."""

from __future__ import annotations

import json
import time

import httpx
import jwt
import pytest
from provider_contracts import answering, dialect_client, engine_job, faults, hosted, load

from adapters.providers.base import GenerationRequest
from adapters.providers.http import EMULATED_API_KEY
from adapters.providers.kling import KlingProvider, code_class
from contracts.provider import ErrorClass, JobStatus, SubmitOutcome
from emulator.dialects import kling as dialect

ACCESS = "ak-kling-0123456789"
REQUEST = GenerationRequest(request_key="task1-a1", model="kling-v2-1", prompt="A lamp",
                            image_url="https://img.example/lamp.png", aspect_ratio="9:16", duration_s=5)


def kling(key: str = ACCESS, secret: str = EMULATED_API_KEY, **kw) -> KlingProvider:  # noqa: ANN003
    return hosted(KlingProvider, key, extra_secret=secret, **kw)


def kling_answering(handler) -> KlingProvider:  # noqa: ANN001 - httpx handler
    return answering(KlingProvider, ACCESS, handler, extra_secret=EMULATED_API_KEY)


def test_the_jwt_is_what_kling_documents():
    claims = jwt.decode(kling()._bearer()["Authorization"].split()[1], EMULATED_API_KEY, algorithms=["HS256"])
    assert claims["iss"] == ACCESS and claims["exp"] - time.time() > 1700 and claims["nbf"] <= time.time()
    assert kling(secret="").missing_setting == "REELQUEUE_KLING_SECRET_KEY"
    assert kling(key="").missing_setting == "REELQUEUE_KLING_API_KEY"


def test_documented_request_is_accepted_and_the_adapter_sends_that_shape():
    dialect.Image2VideoIn.model_validate(load("kling", "create_request.json"))
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json=load("kling", "create_response.json"))

    result = kling_answering(answer).submit(REQUEST)
    assert result.outcome is SubmitOutcome.ACCEPTED and result.job_id == "task_def456uvw123"
    body = json.loads(sent[0].content)
    assert body["external_task_id"] == "task1-a1" and body["duration"] == "5" and body["image"] == REQUEST.image_url
    assert sent[0].headers["Authorization"].startswith("Bearer ey")
    dialect.Image2VideoIn.model_validate(body)


@pytest.mark.parametrize(("name", "status", "error_class"), [
    ("task_processing.json", JobStatus.RUNNING, None),
    ("task_succeed.json", JobStatus.SUCCEEDED, None),
    ("task_failed.json", JobStatus.FAILED, ErrorClass.MODERATION),
])
def test_documented_tasks_read_by_the_adapter_and_written_by_the_dialect(name, status, error_class):
    fixture = load("kling", name)
    state = kling_answering(lambda r: httpx.Response(200, json=fixture)).get_job(fixture["data"]["task_id"])
    assert (state.status, state.error_class) == (status, error_class)
    assert state.request_key == fixture["data"]["task_info"]["external_task_id"]
    if status is JobStatus.SUCCEEDED:
        assert state.outputs[0].url.endswith("output.mp4") and state.outputs[0].expires_at is not None
    engine_status = {"processing": "running", "succeed": "succeeded", "failed": "failed"}
    written = dialect.task_json(engine_job(engine_status[fixture["data"]["task_status"]],
                                           error_code="SAFETY.INPUT.TEXT"), "my_custom_task_001")
    assert set(written) == set(fixture["data"])
    back = kling_answering(lambda r: httpx.Response(200, json={"code": 0, "data": written})).get_job("job_1")
    assert (back.status, back.error_class) == (status, error_class)


@pytest.mark.parametrize(("name", "http_status", "outcome", "error_class"), [
    ("error_1303.json", 429, SubmitOutcome.REJECTED_RETRYABLE, ErrorClass.RETRYABLE),
    ("error_1301.json", 400, SubmitOutcome.REJECTED_FINAL, ErrorClass.MODERATION),
])
def test_documented_refusals(name, http_status, outcome, error_class):
    result = kling_answering(lambda r: httpx.Response(http_status, json=load("kling", name))).submit(REQUEST)
    assert (result.outcome, result.error_class) == (outcome, error_class)
    assert code_class(1102) is ErrorClass.NON_RETRYABLE and code_class(5001) is ErrorClass.RETRYABLE


def test_the_adapter_against_the_dialect(tmp_path):
    with dialect_client(tmp_path, "kling") as client:
        provider = kling(client=client)
        sent = provider.submit(REQUEST)
        assert sent.outcome is SubmitOutcome.ACCEPTED
        assert [j.job_id for j in provider.find_by_request_key("task1-a1")] == [sent.job_id]
        assert provider.find_by_request_key("task9-a1") == []
        assert provider.get_job(sent.job_id).status is JobStatus.QUEUED
        again = provider.submit(REQUEST)  # Kling refuses an external_task_id it has seen
        assert (again.outcome, again.http_status) == (SubmitOutcome.REJECTED_FINAL, 400)
        assert provider.check().ok

        faults(client, submit_status=429, submit_status_count=1)
        refused = provider.submit(REQUEST.model_copy(update={"request_key": "task2-a1"}))
        assert (refused.outcome, refused.http_status) == (SubmitOutcome.REJECTED_RETRYABLE, 429)
        assert "code 1303" in refused.error_message

        forged = kling(secret="not-the-secret", client=client)
        denied = forged.submit(REQUEST.model_copy(update={"request_key": "task3-a1"}))
        assert (denied.outcome, denied.http_status) == (SubmitOutcome.REJECTED_FINAL, 401)
        assert "not-the-secret" not in denied.error_message and not forged.check().ok
