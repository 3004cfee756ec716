"""Luma: the contract fixtures (tests/fixtures/providers/luma, from the official SDK's tests and types)
against the adapter and the emulator's dialect; the adapter on the dialect, reconcile by listing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from provider_contracts import answering, dialect_client, engine_job, faults, hosted, load

from adapters.providers.base import GenerationRequest, ProviderError
from adapters.providers.luma import LumaProvider
from contracts.provider import ErrorClass, JobStatus, SubmitOutcome
from emulator.dialects import luma as dialect
from emulator.store import JobRecord

KEY = "luma-secret-key-0123456789"
REQUEST = GenerationRequest(request_key="task1-a1", model="ray-2", prompt="A lamp",
                            image_url="https://img.example/lamp.png?X-Amz-Signature=1", aspect_ratio="9:16",
                            duration_s=5)


def luma_answering(handler) -> LumaProvider:  # noqa: ANN001 - httpx handler
    return answering(LumaProvider, KEY, handler)


def test_documented_request_is_accepted_and_the_adapter_sends_that_shape():
    dialect.VideoIn.model_validate(load("luma", "create_request.json"))
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(201, json=load("luma", "generation_queued.json"))

    result = luma_answering(answer).submit(REQUEST)
    assert result.outcome is SubmitOutcome.ACCEPTED and result.job_id == "123e4567-e89b-12d3-a456-426614174000"
    body = json.loads(sent[0].content)
    assert sent[0].url.path == "/generations/video" and body["duration"] == "5s"
    assert body["keyframes"]["frame0"] == {"type": "image", "url": REQUEST.image_url}
    assert set(body) <= set(load("luma", "create_request.json"))
    dialect.VideoIn.model_validate(body)


@pytest.mark.parametrize(("name", "status", "error_class"), [
    ("generation_queued.json", JobStatus.QUEUED, None),
    ("generation_dreaming.json", JobStatus.RUNNING, None),
    ("generation_completed.json", JobStatus.SUCCEEDED, None),
    ("generation_failed.json", JobStatus.FAILED, ErrorClass.MODERATION),
])
def test_documented_generations_read_by_the_adapter_and_written_by_the_dialect(name, status, error_class):
    fixture = load("luma", name)
    state = luma_answering(lambda r: httpx.Response(200, json=fixture)).get_job(fixture["id"])
    assert (state.status, state.error_class) == (status, error_class)
    if status is JobStatus.SUCCEEDED:
        assert [o.url for o in state.outputs] == [fixture["assets"]["video"]]
    engine_status = {"queued": "queued", "dreaming": "running", "completed": "succeeded", "failed": "failed"}
    job = engine_job(engine_status[fixture["state"]], error_code="SAFETY.INPUT.TEXT")
    record = JobRecord(id=job.id, request_key="luma:x", model=job.model, prompt="p", image_url="https://i/x.png",
                       aspect_ratio="16:9", duration_s=5, overlay_lines=[], webhook_url=None, status=job.status,
                       created_at=0, updated_at=0)
    written = dialect.generation_json(job, record)
    assert set(written) == set(fixture) and set(written["request"]) == set(fixture["request"])
    back = luma_answering(lambda r: httpx.Response(200, json=written)).get_job(job.id)
    assert (back.status, back.error_class) == (status, error_class)


def test_reconcile_matches_the_echoed_request_in_the_window():
    listing = load("luma", "list_response.json")
    mine = dict(listing["generations"][0], id="mine", created_at=datetime.now(UTC).isoformat(),
                request={"model": "ray-2", "prompt": "A lamp", "aspect_ratio": "9:16", "duration": "5s",
                         "keyframes": {"frame0": {"type": "image", "url": "https://img.example/lamp.png?sig=2"}}})
    other = dict(mine, id="other", request=dict(mine["request"], prompt="A chair"))
    old = dict(mine, id="old", created_at="2024-01-01T00:00:00Z")
    provider = luma_answering(lambda r: httpx.Response(200, json=dict(listing, generations=[mine, other, old])))
    found = provider.find_by_request(REQUEST, datetime.now(UTC) - timedelta(minutes=5))
    assert [j.job_id for j in found] == ["mine"]
    with pytest.raises(ProviderError):
        provider.find_by_request_key("task1-a1")


def test_the_adapter_against_the_dialect(tmp_path):
    with dialect_client(tmp_path, "luma") as client:
        provider = hosted(LumaProvider, KEY, client=client)
        before = datetime.now(UTC)
        sent = provider.submit(REQUEST)
        assert sent.outcome is SubmitOutcome.ACCEPTED
        assert [j.job_id for j in provider.find_by_request(REQUEST, before)] == [sent.job_id]
        assert provider.find_by_request(REQUEST.model_copy(update={"prompt": "other"}), before) == []
        assert provider.get_job(sent.job_id).status is JobStatus.QUEUED
        assert provider.check().ok
        faults(client, submit_status=429, submit_status_count=1)
        refused = provider.submit(REQUEST)
        assert (refused.outcome, refused.http_status, refused.retry_after_s) == (
            SubmitOutcome.REJECTED_RETRYABLE, 429, None)
        faults(client, submit_status=502, submit_status_count=1)
        assert provider.submit(REQUEST).outcome is SubmitOutcome.REJECTED_RETRYABLE  # Luma's own error body
