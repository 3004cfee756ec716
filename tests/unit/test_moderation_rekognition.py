"""Rekognition moderation: the documented answer read by the adapter, its verdicts by taxonomy,
its error classes, and the adapter speaking to the emulator's dialect in-process (signature,
flag marker, faults, caps)."""

from __future__ import annotations

import base64
from io import BytesIO

import httpx
import pytest
from fastapi.testclient import TestClient
from PIL import Image
from provider_contracts import dialect_client, faults, load

from adapters.aws_sigv4 import Credentials, sign_request
from adapters.providers.http import EMULATED_API_KEY
from contracts.moderation import Frame, FramesSubject, ImageSubject, ModeratorError, TextSubject, Verdict
from emulator.dialects import rekognition as dialect
from emulator.flag_marker import sample_png
from moderation.rekognition import (
    IMAGE_BYTES_MAX,
    TARGET,
    ModerationLabelsResponse,
    RekognitionModerationConfig,
    RekognitionModerator,
)
from moderation.verdicts import Threshold

SECRET = "test-secret-0123456789abcdef"


def data_uri(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode()


def jpeg(marked: bool) -> bytes:
    out = BytesIO()
    Image.open(BytesIO(sample_png(320, 240, marked=marked))).save(out, "JPEG", quality=90)
    return out.getvalue()


MARKED, PLAIN = data_uri(sample_png(marked=True)), data_uri(sample_png(marked=False))


def on_emulator(client: TestClient, **config) -> RekognitionModerator:  # noqa: ANN003
    made = RekognitionModerator(RekognitionModerationConfig.emulated("http://testserver").model_copy(update=config))
    made._client = TestClient(client.app, base_url=made.config.endpoint)
    return made


def answering(handler, **config) -> RekognitionModerator:  # noqa: ANN001, ANN003 - httpx handler
    made = RekognitionModerator(RekognitionModerationConfig(access_key_id="AKIATEST", secret_access_key=SECRET,
                                                            **config))
    made._client = httpx.Client(base_url=made.config.endpoint, transport=httpx.MockTransport(handler))
    return made


def test_the_documented_answer_mapped_by_taxonomy():
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=load("rekognition", "detect_moderation_labels_response.json"))

    judgement = answering(handler).judge(ImageSubject(url=PLAIN))
    # Violence 88.1 >= its block 0.8, and Weapons takes its parent's threshold; Alcohol 62 is under 0.95
    assert (judgement.verdict, judgement.categories) == (Verdict.BLOCK, ("Violence", "Weapons"))
    assert judgement.scores == pytest.approx({"Violence": 0.881, "Weapons": 0.881, "Alcohol": 0.62,
                                              "Alcoholic Beverages": 0.62})
    assert (judgement.moderator, judgement.model_version) == ("rekognition", "7.0")
    assert judgement.evidence.note == "Alcohol; Alcohol > Alcoholic Beverages; Violence; Violence > Weapons"
    (request,) = seen
    assert str(request.url) == "https://rekognition.us-east-1.amazonaws.com/"
    assert request.headers["x-amz-target"] == TARGET and "Credential=AKIATEST/" in request.headers["authorization"]
    assert request.read().startswith(b'{"Image": {"Bytes": "') and b'"MinConfidence": 50.0' in request.read()

    lenient = answering(handler, thresholds={"Violence": Threshold(review=0.85, block=0.95),
                                             "Weapons": Threshold(review=0.9, block=0.95)})
    reviewed = lenient.judge(ImageSubject(url=PLAIN))
    assert (reviewed.verdict, reviewed.categories) == (Verdict.REVIEW, ("Violence",))


def test_frames_one_call_each_flagged_times_as_evidence(tmp_path):
    with dialect_client(tmp_path, "rekognition") as client:
        rekognition = on_emulator(client)
        assert rekognition.judge(ImageSubject(url=PLAIN)).verdict is Verdict.ALLOW
        flagged = rekognition.judge(ImageSubject(url=data_uri(jpeg(True), "image/jpeg")))
        assert (flagged.verdict, flagged.categories) == (Verdict.BLOCK, ("Graphic Violence", "Violence"))
        assert flagged.scores == {"Violence": 0.96, "Graphic Violence": 0.96} and flagged.model_version == "7.0"
        frames = rekognition.judge(FramesSubject(frames=(Frame(at_s=0.0, url=PLAIN), Frame(at_s=2.0, url=MARKED),
                                                         Frame(at_s=4.0, url=PLAIN))))
        assert frames.verdict is Verdict.BLOCK and frames.evidence.frames_s == (2.0,)
        assert client.get("/_sim/stats").json()["sync_calls"] == 5


def test_the_dialect_checks_the_signature_and_its_credential(tmp_path):
    body = b'{"Image": {"Bytes": ""}}'
    headers = {"Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": TARGET}
    with dialect_client(tmp_path, "rekognition") as client:
        def sent(credentials: Credentials, service: str = "rekognition", **extra: str) -> httpx.Response:
            request = client.build_request("POST", "/rekognition/", content=body, headers=headers)
            sign_request(request, credentials, "us-east-1", service)
            request.headers.update(extra)
            return client.send(request)

        known = RekognitionModerationConfig.emulated("http://x").access_key_id
        unsigned = client.post("/rekognition/", content=body, headers=headers)
        assert (unsigned.status_code, unsigned.json()["__type"]) == (403, "MissingAuthenticationTokenException")
        stranger = sent(Credentials(access_key_id="AKIAOTHER", secret_access_key=EMULATED_API_KEY))
        assert (stranger.status_code, stranger.json()["__type"]) == (400, "UnrecognizedClientException")
        forged = sent(Credentials(access_key_id=known, secret_access_key="not-the-secret"))
        assert (forged.status_code, forged.headers["x-amzn-errortype"]) == (403, "InvalidSignatureException")
        other_service = sent(Credentials(access_key_id=known, secret_access_key=EMULATED_API_KEY), service="s3")
        assert other_service.json()["__type"] == "InvalidSignatureException"
        good = Credentials(access_key_id=known, secret_access_key=EMULATED_API_KEY)
        bad_input = sent(good)  # signed right, an empty image
        assert (bad_input.status_code, bad_input.json()["__type"]) == (400, "InvalidImageFormatException")
        assert client.get("/_sim/stats").json()["sync_calls"] == 1


@pytest.mark.parametrize(("fault", "status", "kind"), [
    ({"submit_status": 429, "submit_status_count": 1}, 400, "ProvisionedThroughputExceededException"),
    ({"submit_status": 503, "submit_status_count": 1}, 503, "ThrottlingException"),
    ({"submit_outage_s": 60}, 503, "ThrottlingException"),
])
def test_throttling_and_outages_are_retryable(tmp_path, fault, status, kind):
    with dialect_client(tmp_path, "rekognition") as client:
        faults(client, dialect="rekognition", **fault)
        with pytest.raises(ModeratorError) as raised:
            on_emulator(client).judge(ImageSubject(url=PLAIN))
        assert (raised.value.retryable, raised.value.http_status) == (True, status)
        assert kind in str(raised.value) and EMULATED_API_KEY not in str(raised.value)
        client.delete("/_sim/faults").raise_for_status()
        faults(client, dialect="openai", submit_outage_s=60)  # another dialect's outage leaves it answering
        assert on_emulator(client).judge(ImageSubject(url=PLAIN)).verdict is Verdict.ALLOW


@pytest.mark.parametrize(("status", "kind", "retryable"), [
    (500, "ThrottlingException", True),
    (400, "ProvisionedThroughputExceededException", True),
    (400, "com.amazonaws.rekognition#LimitExceededException", True),
    (500, "InternalServerError", True),
    (502, "", True),
    (400, "InvalidImageFormatException", False),
    (400, "ImageTooLargeException", False),
    (400, "InvalidParameterException", False),
    (400, "AccessDeniedException", False),
    (403, "InvalidSignatureException", False),
])
def test_error_classes(status, kind, retryable):
    def handler(request: httpx.Request) -> httpx.Response:
        body = load("rekognition", "error_throttling.json") | {"__type": kind} if kind else {}
        return httpx.Response(status, json=body)

    with pytest.raises(ModeratorError) as raised:
        answering(handler).judge(ImageSubject(url=PLAIN))
    assert (raised.value.retryable, raised.value.http_status) == (retryable, status)
    assert raised.value.retry_after_s is None  # AWS sends no hint: the caller's policy waits


def test_the_error_type_from_the_header_when_the_body_has_none():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, headers={"x-amzn-ErrorType": "ThrottlingException:http://internal.amazon.com/"},
                              content=b"")

    with pytest.raises(ModeratorError) as raised:
        answering(handler).judge(ImageSubject(url=PLAIN))
    assert raised.value.retryable and "ThrottlingException" in str(raised.value)


def test_timeouts_are_retryable_and_never_show_the_secret():
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout(f"no answer ({SECRET})", request=request)

    with pytest.raises(ModeratorError) as slow:
        answering(handler).judge(ImageSubject(url=PLAIN))
    assert slow.value.retryable and SECRET not in str(slow.value)


def test_what_is_refused_before_sending():
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(200, json={"ModerationLabels": [], "ModerationModelVersion": "7.0"})

    rekognition = answering(handler)
    gif = data_uri(b"GIF89a" + b"\0" * 32, "image/gif")
    over = data_uri(b"\x89PNG\r\n\x1a\n" + b"\0" * IMAGE_BYTES_MAX, "image/png")
    refused = [TextSubject(text="a lamp"), ImageSubject(url="https://example.com/a.png"), ImageSubject(url=gif),
               ImageSubject(url=over), ImageSubject(url="data:image/png;base64,@@@"),
               FramesSubject(frames=(Frame(at_s=0, url=PLAIN), Frame(at_s=1, url=gif)))]
    for subject in refused:
        with pytest.raises(ModeratorError) as raised:
            rekognition.judge(subject)
        assert not raised.value.retryable, subject
    with pytest.raises(ModeratorError):
        answering(handler, max_image_bytes=len(sample_png(marked=False)) - 1).judge(ImageSubject(url=PLAIN))
    assert calls == []
    with pytest.raises(ModeratorError) as keyless:
        RekognitionModerator(RekognitionModerationConfig()).judge(ImageSubject(url=PLAIN))
    assert not keyless.value.retryable
    with pytest.raises(ValueError):
        RekognitionModerationConfig(max_image_bytes=IMAGE_BYTES_MAX + 1)
    with pytest.raises(ValueError, match="hides labels"):
        RekognitionModerationConfig(min_confidence=80)  # labels at a 0.5 review threshold would not come back


def test_an_unreadable_or_oversized_answer_is_final():
    with pytest.raises(ModeratorError) as unreadable:
        answering(lambda r: httpx.Response(200, json={"labels": []})).judge(ImageSubject(url=PLAIN))
    with pytest.raises(ModeratorError) as big:
        answering(lambda r: httpx.Response(200, content=b" " * (300 * 1024))).judge(ImageSubject(url=PLAIN))
    assert not unreadable.value.retryable and not big.value.retryable


def test_the_dialect_writes_what_the_adapter_reads():
    written = {"ModerationLabels": [dict(label) for label in dialect.FLAG_LABELS],
               "ModerationModelVersion": dialect.MODEL_VERSION}
    assert ModerationLabelsResponse.model_validate(written).ModerationLabels[1].ParentName == "Violence"
