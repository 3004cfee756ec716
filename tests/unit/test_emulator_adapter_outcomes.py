"""How the emulator adapter reads a submit's answer: only an answer that proves the provider refused
(its own error body) is "not created"; anything after the body left without that proof is unknown."""

from __future__ import annotations

import httpx
import pytest

from adapters.providers.base import GenerationRequest
from adapters.providers.emulator import EmulatorProvider
from contracts.provider import ErrorClass, SubmitOutcome

REQUEST = GenerationRequest(request_key="t-a1", model="m", prompt="p", aspect_ratio="9:16", duration_s=1.0)


def provider_answering(handler) -> EmulatorProvider:  # noqa: ANN001 - httpx handler
    provider = EmulatorProvider("http://emulator.test", "key")
    provider._client = httpx.Client(base_url="http://emulator.test", transport=httpx.MockTransport(handler))
    return provider


def refusal(status: int) -> httpx.Response:
    return httpx.Response(status, json={"error": {"code": "RATE_LIMIT.QUEUE_FULL", "message": "busy"}},
                          headers={"Retry-After": "2"})


@pytest.mark.parametrize(("answer", "outcome"), [
    (lambda r: refusal(429), SubmitOutcome.REJECTED_RETRYABLE),
    (lambda r: refusal(503), SubmitOutcome.REJECTED_RETRYABLE),
    (lambda r: httpx.Response(500, text="Internal Server Error"), SubmitOutcome.UNKNOWN),
    (lambda r: httpx.Response(502, text="<html>Bad Gateway</html>"), SubmitOutcome.UNKNOWN),
    (lambda r: httpx.Response(504, json={"message": "upstream timed out"}), SubmitOutcome.UNKNOWN),
    (lambda r: httpx.Response(422, json={"error": {"code": "VALIDATION.X", "message": "bad"}}),
     SubmitOutcome.REJECTED_FINAL),
])
def test_submit_answers(answer, outcome):
    assert provider_answering(answer).submit(REQUEST).outcome is outcome


def test_refusal_carries_the_retry_hint():
    assert provider_answering(lambda r: refusal(429)).submit(REQUEST).retry_after_s == 2.0


def test_not_sent_is_a_refusal_and_a_lost_answer_is_unknown():
    def connect_error(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    def read_timeout(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("no answer", request=request)

    assert provider_answering(connect_error).submit(REQUEST).outcome is SubmitOutcome.REJECTED_RETRYABLE
    assert provider_answering(read_timeout).submit(REQUEST).outcome is SubmitOutcome.UNKNOWN


def failed_job(code: str) -> httpx.Response:
    now = "2026-12-01T00:00:00Z"
    return httpx.Response(200, json={
        "id": "job_1", "request_key": "t-a1", "model": "m", "aspect_ratio": "9:16", "duration_s": 1.0,
        "status": "failed", "progress": 0.95, "created_at": now, "updated_at": now,
        "error": {"code": code, "message": "cannot fetch image: Server error '500 Internal Server Error'"}})


@pytest.mark.parametrize(("code", "error_class"), [
    ("INPUT.IMAGE_UNREACHABLE", ErrorClass.RETRYABLE),  # our storage restarting: a new attempt gets a new link
    ("INPUT.IMAGE_INVALID", ErrorClass.NON_RETRYABLE),
    ("INPUT.IMAGE_TOO_LARGE", ErrorClass.NON_RETRYABLE),
    ("INTERNAL.SIMULATED_FAILURE", ErrorClass.RETRYABLE),
])
def test_failed_job_error_class(code, error_class):
    assert provider_answering(lambda r: failed_job(code)).get_job("job_1").error_class is error_class
