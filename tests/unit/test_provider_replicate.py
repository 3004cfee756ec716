"""Replicate: the contract fixtures (tests/fixtures/providers/replicate, from the official client's
recorded cassettes) against the adapter and the emulator's dialect; the adapter on the dialect."""

from __future__ import annotations

import json

import httpx
import pytest
from provider_contracts import answering, dialect_client, engine_job, faults, hosted, load

from adapters.providers.base import GenerationRequest, WebhookRejected
from adapters.providers.replicate import ReplicateProvider
from contracts.provider import ErrorClass, JobStatus, SubmitOutcome
from emulator.dialects import replicate as dialect
from emulator.signing import webhook_headers
from emulator.store import JobRecord

KEY = "r8_secret_key_0123456789"
SECRET = "whsec_" + "B" * 43 + "="
REQUEST = GenerationRequest(request_key="task1-a1", model="kwaivgi/kling-v2.1", prompt="A lamp",
                            image_url="https://img.example/lamp.png", aspect_ratio="9:16", duration_s=5,
                            webhook_url="https://hooks.example/webhooks/replicate")


def replicate_answering(handler) -> ReplicateProvider:  # noqa: ANN001 - httpx handler
    return answering(ReplicateProvider, KEY, handler)


def test_documented_request_is_accepted_and_the_adapter_sends_that_shape():
    dialect.PredictionIn.model_validate(load("replicate", "create_request.json"))
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(201, json=load("replicate", "prediction_starting.json"))

    result = replicate_answering(answer).submit(REQUEST)
    assert result.outcome is SubmitOutcome.ACCEPTED and result.job_id == "heat2o3bzn3ahtr6bjfftvbaci"
    body = json.loads(sent[0].content)
    assert sent[0].url.path == "/v1/models/kwaivgi/kling-v2.1/predictions" and "prefer" not in sent[0].headers
    assert body["webhook"] == REQUEST.webhook_url and body["input"]["start_image"] == REQUEST.image_url
    dialect.PredictionIn.model_validate(body)


@pytest.mark.parametrize(("name", "status", "error_class", "billed"), [
    ("prediction_starting.json", JobStatus.QUEUED, None, False),
    ("prediction_succeeded.json", JobStatus.SUCCEEDED, None, True),
    ("prediction_canceled.json", JobStatus.CANCELED, None, True),
    ("prediction_failed_e005.json", JobStatus.FAILED, ErrorClass.MODERATION, False),
])
def test_documented_predictions_read_by_the_adapter_and_written_by_the_dialect(name, status, error_class, billed):
    fixture = load("replicate", name)
    provider = replicate_answering(lambda r: httpx.Response(200, json=fixture))
    state = provider.get_job(fixture["id"])
    assert (state.status, state.error_class) == (status, error_class)
    assert provider.billed(state) is billed
    priced = provider.priced(state, "kwaivgi/kling-v2.1", 5)
    assert priced.usage is None or priced.usage.cost == (0.25 if billed else 0.0)
    if status is JobStatus.SUCCEEDED:
        assert [o.url for o in state.outputs] == fixture["output"] and state.outputs[0].expires_at is not None
    engine_status = {"starting": "queued", "succeeded": "succeeded", "canceled": "canceled", "failed": "failed"}
    job = engine_job(engine_status[fixture["status"]], error_code="SAFETY.INPUT.TEXT")
    record = JobRecord(id=job.id, request_key="replicate:7:x", model=job.model, prompt="p", image_url=None,
                       aspect_ratio="16:9", duration_s=5, overlay_lines=[], webhook_url=None, status=job.status,
                       created_at=0, updated_at=0, started_at=1.0)
    written = dialect.prediction_json(job, record, "http://emulator.test/replicate")
    assert {"id", "model", "input", "status", "error", "output", "created_at", "urls"} <= set(written)
    assert set(fixture) - {"version", "webhook_completed", "logs"} <= set(written)
    assert replicate_answering(lambda r: httpx.Response(200, json=written)).get_job(job.id).status is status


def test_the_adapter_against_the_dialect(tmp_path):
    with dialect_client(tmp_path, "replicate") as client:
        provider = hosted(ReplicateProvider, KEY, client=client, webhook_secret=SECRET)
        assert provider.capabilities.webhooks and provider.capabilities.reconcile_by_list
        first = provider.submit(REQUEST)
        other = provider.submit(REQUEST.model_copy(update={"request_key": "task2-a1"}))
        assert first.outcome is other.outcome is SubmitOutcome.ACCEPTED
        for n in range(dialect.PAGE_SIZE):  # newer predictions push ours to the second page
            provider.submit(REQUEST.model_copy(update={"request_key": f"filler{n}-a1"}))
        assert [j.job_id for j in provider.find_by_request_key("task1-a1")] == [first.job_id]
        assert provider.find_by_request_key("task9-a1") == []
        assert provider.get_job(first.job_id).status is JobStatus.QUEUED
        canceled = provider.cancel(first.job_id)
        assert (canceled.status, canceled.raw_status, provider.billed(canceled)) == (
            JobStatus.CANCELED, "aborted", False)  # it never started
        assert provider.check().ok

        faults(client, submit_status=429, submit_status_count=1)
        refused = provider.submit(REQUEST)
        assert (refused.outcome, refused.retry_after_s) == (SubmitOutcome.REJECTED_RETRYABLE, 1.0)
        assert "throttled" in refused.error_message
        faults(client, submit_status=500, submit_status_count=1)
        assert provider.submit(REQUEST).outcome is SubmitOutcome.REJECTED_RETRYABLE  # an RFC 7807 refusal
        bad = provider.submit(REQUEST.model_copy(update={"duration_s": 7}))
        assert (bad.outcome, bad.http_status) == (SubmitOutcome.REJECTED_FINAL, 422)


def test_webhooks_are_verified():
    provider = hosted(ReplicateProvider, KEY, webhook_secret=SECRET)
    body = json.dumps(load("replicate", "prediction_succeeded.json")).encode()
    headers = webhook_headers(SECRET, "msg_1", body)
    event = provider.parse_webhook(headers, body)
    assert (event.event_id, event.job_id, event.status, event.verified) == (
        "msg_1", "vgcm4plb7tgzlyznry5d5jkgvu", JobStatus.SUCCEEDED, True)
    with pytest.raises(WebhookRejected):
        provider.parse_webhook({**headers, "webhook-signature": "v1,AAAA"}, body)
    with pytest.raises(WebhookRejected):
        hosted(ReplicateProvider, KEY).parse_webhook(headers, body)  # no secret: none asked for
    assert not hosted(ReplicateProvider, KEY).capabilities.webhooks
