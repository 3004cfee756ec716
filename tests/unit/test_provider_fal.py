"""fal: the contract fixtures (tests/fixtures/providers/fal, from fal-client's source and the app's
documented input/output) against the adapter and the emulator's dialect; the adapter on the dialect."""

from __future__ import annotations

import json

import httpx
import pytest
from provider_contracts import answering, dialect_client, engine_job, faults, hosted, load

from adapters.providers.base import GenerationRequest
from adapters.providers.fal import FalProvider, app_of
from contracts.provider import ErrorClass, JobStatus, SubmitOutcome
from emulator.dialects import fal as dialect

KEY = "fal-key-id:fal-key-secret-0123456789"
MODEL = "fal-ai/kling-video/v2.1/standard/image-to-video"
REQUEST = GenerationRequest(request_key="task1-a1", model=MODEL, prompt="A lamp",
                            image_url="https://img.example/lamp.png", aspect_ratio="9:16", duration_s=5)
JOB = "fal-ai/kling-video/requests/764cabcf-b745-4b3e-ae38-1200304cf45b"


def fal_answering(handler) -> FalProvider:  # noqa: ANN001 - httpx handler
    return answering(FalProvider, KEY, handler)


def test_documented_request_is_accepted_and_the_adapter_sends_that_shape():
    dialect.VideoInput.model_validate(load("fal", "submit_request.json"))
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json=load("fal", "submit_response.json"))

    result = fal_answering(answer).submit(REQUEST)
    assert (result.outcome, result.job_id) == (SubmitOutcome.ACCEPTED, JOB)
    assert sent[0].url.path == f"/{MODEL}" and sent[0].headers["Authorization"] == f"Key {KEY}"
    body = json.loads(sent[0].content)
    assert body["image_url"] == REQUEST.image_url and body["duration"] == "5"
    dialect.VideoInput.model_validate(body)
    assert app_of(MODEL) == "fal-ai/kling-video"


@pytest.mark.parametrize(("name", "status", "error_class"), [
    ("status_in_queue.json", JobStatus.QUEUED, None),
    ("status_in_progress.json", JobStatus.RUNNING, None),
    ("status_completed.json", JobStatus.SUCCEEDED, None),
    ("status_failed_policy.json", JobStatus.FAILED, ErrorClass.MODERATION),
])
def test_documented_statuses_read_by_the_adapter_and_written_by_the_dialect(name, status, error_class):
    fixture = load("fal", name)

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=fixture if request.url.path.endswith("/status") else load("fal", "result.json"))

    state = fal_answering(answer).get_job(JOB)
    assert (state.status, state.error_class) == (status, error_class)
    if status is JobStatus.SUCCEEDED:
        assert [o.url for o in state.outputs] == [load("fal", "result.json")["video"]["url"]]
    engine_status = {"IN_QUEUE": "queued", "IN_PROGRESS": "running", "COMPLETED": "succeeded"}
    engine = "failed" if fixture.get("error") else engine_status[fixture["status"]]
    written = dialect.status_json(engine_job(engine, error_code="SAFETY.INPUT.TEXT"), 2)
    assert set(written) <= set(fixture) and written["status"] == fixture["status"]
    assert written.get("error_type") == fixture.get("error_type")


def test_documented_refusal_is_moderation():
    refused = fal_answering(lambda r: httpx.Response(422, json=load("fal", "error_422.json"))).submit(REQUEST)
    assert (refused.outcome, refused.error_class) == (SubmitOutcome.REJECTED_FINAL, ErrorClass.MODERATION)


def test_the_adapter_against_the_dialect(tmp_path):
    with dialect_client(tmp_path, "fal") as client:
        provider = hosted(FalProvider, KEY, client=client)
        sent = provider.submit(REQUEST)
        assert sent.outcome is SubmitOutcome.ACCEPTED and sent.job_id.startswith("fal-ai/kling-video/requests/")
        assert provider.get_job(sent.job_id).status is JobStatus.QUEUED
        canceled = provider.cancel(sent.job_id)
        assert (canceled.status, provider.billed(canceled)) == (JobStatus.CANCELED, False)
        assert provider.cancel(sent.job_id).status is JobStatus.CANCELED  # 400 ALREADY_COMPLETED is fine
        assert provider.check().ok and not provider.capabilities.can_reconcile
        faults(client, submit_status=429, submit_status_count=1)
        refused = provider.submit(REQUEST)
        assert (refused.outcome, refused.http_status) == (SubmitOutcome.REJECTED_RETRYABLE, 429)
        faults(client, submit_status=503, submit_status_count=1)
        assert provider.submit(REQUEST).outcome is SubmitOutcome.REJECTED_RETRYABLE
        denied = hosted(FalProvider, "", client=client)
        assert not denied.check().ok and denied.check().http_status == 401
