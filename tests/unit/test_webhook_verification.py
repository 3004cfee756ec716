"""Standard Webhooks verification of the emulator's deliveries, on the raw body.

Deliveries are signed by the emulator's own signing code (emulator.signing), the receiver is the
real adapter (EmulatorProvider.parse_webhook over the standardwebhooks package).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from standardwebhooks import Webhook

from adapters.providers.base import WebhookRejected
from adapters.providers.emulator import EmulatorProvider
from adapters.providers.emulator_api import JobOut
from contracts.provider import JobStatus
from emulator.config import new_webhook_secret
from emulator.signing import webhook_headers

SECRET = new_webhook_secret()


def job_body(status: str = "running", job_id: str = "job_abc") -> bytes:
    now = datetime.now(UTC)
    job = JobOut(id=job_id, request_key="task1-a1", model="m", aspect_ratio="9:16", duration_s=2.0, status=status,
                 progress=0.4, created_at=now, updated_at=now)
    return job.model_dump_json().encode()


def receiver(secret: str | None = SECRET) -> EmulatorProvider:
    return EmulatorProvider("http://127.0.0.1:9", "key", webhook_secret=secret)


def signed(body: bytes, *, secret: str = SECRET, msg_id: str = "msg_1", age_s: int = 0) -> dict[str, str]:
    return webhook_headers(secret, msg_id, body, ts=int(time.time()) - age_s)


def rejected(provider: EmulatorProvider, headers: dict[str, str], body: bytes) -> WebhookRejected:
    with pytest.raises(WebhookRejected) as caught:
        provider.parse_webhook(headers, body)
    return caught.value


def test_a_signed_delivery_becomes_a_verified_event() -> None:
    body = job_body("running")
    event = receiver().parse_webhook(signed(body, msg_id="msg_good"), body)
    assert (event.event_id, event.job_id, event.request_key) == ("msg_good", "job_abc", "task1-a1")
    assert event.status is JobStatus.RUNNING and event.raw_status == "running" and event.progress == 0.4
    assert event.verified and event.observed_at is not None
    assert set(event.headers) == {"webhook-id", "webhook-timestamp"}  # never the signature


def test_headers_are_matched_whatever_their_case() -> None:
    body = job_body()
    headers = {k.title(): v for k, v in signed(body).items()}
    assert receiver().parse_webhook(headers, body).verified


def test_a_forged_signature_is_refused() -> None:
    body = job_body()
    error = rejected(receiver(), signed(body, secret=new_webhook_secret()), body)
    assert error.reason == "no valid signature" and not error.malformed


def test_a_body_changed_after_signing_is_refused() -> None:
    body = job_body("running")
    headers = signed(body)
    assert rejected(receiver(), headers, job_body("succeeded")).reason == "no valid signature"
    assert rejected(receiver(), headers, body + b" ").reason == "no valid signature"  # raw bytes, not JSON


@pytest.mark.parametrize(("age_s", "reason"), [(301, "too old"), (600, "too old"), (-301, "future"),
                                               (-600, "future")])
def test_timestamps_beyond_five_minutes_are_refused(age_s: int, reason: str) -> None:
    body = job_body()
    assert reason in rejected(receiver(), signed(body, age_s=age_s), body).reason


@pytest.mark.parametrize("age_s", [240, -240])
def test_timestamps_within_five_minutes_pass(age_s: int) -> None:
    body = job_body()
    assert receiver().parse_webhook(signed(body, age_s=age_s), body).verified


def test_rotated_keys_any_listed_signature_verifies() -> None:
    old, new = new_webhook_secret(), new_webhook_secret()
    body = job_body()
    ts = datetime.now(UTC)
    both = " ".join(Webhook(k).sign("msg_rot", ts, body.decode()) for k in (old, new))
    headers = {"webhook-id": "msg_rot", "webhook-timestamp": str(int(ts.timestamp())), "webhook-signature": both}
    assert receiver(old).parse_webhook(headers, body).verified  # not rotated yet
    assert receiver(new).parse_webhook(headers, body).verified  # rotated
    assert rejected(receiver(new_webhook_secret()), headers, body).reason == "no valid signature"
    future_scheme = {**headers, "webhook-signature": "v1a,c29tZXRoaW5n " + both}  # unknown versions skipped
    assert receiver(new).parse_webhook(future_scheme, body).verified


def test_a_replayed_id_with_a_fresh_timestamp_is_refused() -> None:
    body = job_body()
    captured = signed(body, msg_id="msg_replay", age_s=200)
    replay = {**captured, "webhook-timestamp": str(int(time.time()))}  # the old signature, a new time
    assert rejected(receiver(), replay, body).reason == "no valid signature"


def test_an_exact_replay_verifies_and_keeps_its_id() -> None:
    """Within the tolerance the same delivery verifies again: the inbox drops it by its id."""
    body = job_body()
    headers = signed(body, msg_id="msg_twice")
    first, second = (receiver().parse_webhook(headers, body) for _ in range(2))
    assert first.event_id == second.event_id == "msg_twice"


@pytest.mark.parametrize(
    "change",
    [
        {"webhook-signature": None},
        {"webhook-id": None},
        {"webhook-timestamp": None},
        {"webhook-timestamp": "yesterday"},
        {"webhook-signature": "garbage"},
        {"webhook-signature": "v1,@@not-base64@@"},
    ],
)
def test_missing_or_malformed_headers_are_refused(change: dict[str, str | None]) -> None:
    body = job_body()
    headers = {k: v for k, v in {**signed(body), **change}.items() if v is not None}
    error = rejected(receiver(), headers, body)
    assert not error.malformed and SECRET not in error.reason


def test_a_body_that_is_not_utf8_is_refused() -> None:
    body = b"\xff\xfe" + job_body()
    assert not rejected(receiver(), signed(b"x"), body).malformed


def test_a_signed_body_that_is_not_a_job_is_malformed() -> None:
    body = b'{"hello": "world"}'
    assert rejected(receiver(), signed(body), body).malformed


def test_without_a_secret_the_adapter_offers_no_webhooks_and_accepts_none() -> None:
    body = job_body()
    assert receiver(None).capabilities.webhooks is False
    assert receiver().capabilities.webhooks is True
    assert not rejected(receiver(None), signed(body), body).malformed


def test_ids_longer_than_the_inbox_keeps_are_malformed() -> None:
    body = job_body(job_id="job_" + "x" * 300)
    assert rejected(receiver(), signed(body), body).malformed
    body = job_body()
    assert rejected(receiver(), signed(body, msg_id="msg_" + "y" * 300), body).malformed
