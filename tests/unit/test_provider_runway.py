"""Runway: the contract fixtures (tests/fixtures/providers/runway, from the official SDK) against the
adapter and the emulator's dialect, and the adapter speaking to the dialect in-process."""

from __future__ import annotations

import json

import httpx
import pytest
from provider_contracts import FIXTURES, answering, dialect_client, engine_job, faults, hosted, load

from adapters.providers.base import GenerationRequest
from adapters.providers.runway import RATIOS, RunwayProvider, failure_class
from contracts.provider import ErrorClass, JobStatus, SubmitOutcome
from emulator.dialects import runway as dialect

KEY = "rw-secret-key-0123456789"
REQUEST = GenerationRequest(request_key="task1-a1", model="gen4_turbo", prompt="A lamp",
                            image_url="https://img.example/lamp.png", aspect_ratio="9:16", duration_s=5)


def runway_answering(handler) -> RunwayProvider:  # noqa: ANN001 - httpx handler
    return answering(RunwayProvider, KEY, handler)


@pytest.mark.parametrize("name", ["image_to_video_request.json", "image_to_video_request_all.json"])
def test_documented_requests_are_accepted_by_the_dialect(name):
    dialect.ImageToVideoIn.model_validate(load("runway", name))


def test_the_adapter_sends_what_the_sdk_sends():
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json=load("runway", "image_to_video_response.json"))

    result = runway_answering(answer).submit(REQUEST)
    assert result.outcome is SubmitOutcome.ACCEPTED and result.job_id == "497f6eca-6276-4993-bfeb-53cbbbba6f08"
    body = json.loads(sent[0].content)
    assert sent[0].headers["X-Runway-Version"] == "2024-11-06" and sent[0].url.path == "/v1/image_to_video"
    assert set(body) <= set(load("runway", "image_to_video_request_all.json"))
    assert body["ratio"] == "720:1280" and body["promptImage"] == REQUEST.image_url and body["duration"] == 5
    dialect.ImageToVideoIn.model_validate(body)


@pytest.mark.parametrize(("name", "status", "error_class"), [
    ("task_pending.json", JobStatus.QUEUED, None),
    ("task_throttled.json", JobStatus.THROTTLED, None),
    ("task_running.json", JobStatus.RUNNING, None),
    ("task_succeeded.json", JobStatus.SUCCEEDED, None),
    ("task_failed_safety.json", JobStatus.FAILED, ErrorClass.MODERATION),
    ("task_failed_bad_output.json", JobStatus.FAILED, ErrorClass.RETRYABLE),
    ("task_cancelled.json", JobStatus.CANCELED, None),
])
def test_documented_tasks_read_by_the_adapter_and_written_by_the_dialect(name, status, error_class):
    fixture = load("runway", name)
    state = runway_answering(lambda r: httpx.Response(200, json=fixture)).get_job(fixture["id"])
    assert (state.status, state.error_class, state.raw_status) == (status, error_class, fixture["status"])
    if status is JobStatus.SUCCEEDED:
        assert [o.url for o in state.outputs] == fixture["output"]
    # The dialect writes the same keys for the same state.
    engine_status = {v: k for k, v in dialect._STATUS.items()}[fixture["status"]]
    code = fixture.get("failureCode", "").replace("INTERNAL.BAD_OUTPUT.CODE01", "INTERNAL.SIMULATED_FAILURE")
    written = dialect.task_json(engine_job(engine_status, error_code=code or None))
    assert set(written) == set(fixture)
    assert failure_class(written.get("failureCode")) is (error_class or ErrorClass.RETRYABLE)


def test_failure_codes():
    assert failure_class("INPUT_PREPROCESSING.SAFETY.TEXT") is ErrorClass.MODERATION
    assert failure_class("SAFETY.OUTPUT.VIDEO") is ErrorClass.MODERATION
    assert failure_class("INTERNAL.BAD_OUTPUT.CODE01") is ErrorClass.RETRYABLE
    assert failure_class("ASSET.INVALID") is ErrorClass.NON_RETRYABLE


def test_the_adapter_against_the_dialect(tmp_path):
    with dialect_client(tmp_path, "runway") as client:
        provider = hosted(RunwayProvider, KEY, client=client)
        sent = provider.submit(REQUEST)
        assert sent.outcome is SubmitOutcome.ACCEPTED
        assert provider.get_job(sent.job_id).status in (JobStatus.QUEUED, JobStatus.THROTTLED, JobStatus.RUNNING)
        assert provider.cancel(sent.job_id).status is JobStatus.CANCELED
        assert provider.check().ok

        faults(client, submit_status=429, submit_status_count=1)
        refused = provider.submit(REQUEST)
        assert (refused.outcome, refused.retry_after_s, refused.http_status) == (
            SubmitOutcome.REJECTED_RETRYABLE, 1.0, 429)
        faults(client, submit_status=503, submit_status_count=1)
        assert provider.submit(REQUEST).outcome is SubmitOutcome.REJECTED_RETRYABLE  # Runway's own error body

        keyless = hosted(RunwayProvider, "", client=client)
        assert keyless.missing_setting == "REELQUEUE_RUNWAY_API_KEY"
        denied = keyless.submit(REQUEST)
        assert (denied.outcome, denied.http_status) == (SubmitOutcome.REJECTED_FINAL, 401)
        assert not keyless.check().ok and keyless.check().reachable


def test_unknown_outcomes_and_no_secret_in_messages():
    lost = runway_answering(lambda r: httpx.Response(502, text="<html>Bad Gateway</html>")).submit(REQUEST)
    assert lost.outcome is SubmitOutcome.UNKNOWN

    def timeout(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout(f"no answer for {request.headers['Authorization']}", request=request)

    unknown = runway_answering(timeout).submit(REQUEST)
    assert unknown.outcome is SubmitOutcome.UNKNOWN and KEY not in unknown.error_message
    assert not RunwayProvider.base_capabilities.can_reconcile
    assert set(RATIOS) == {"9:16", "16:9", "1:1"} and FIXTURES.is_dir()
