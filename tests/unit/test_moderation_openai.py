"""OpenAI moderation: the documented answer read by the adapter and written by the emulator's
dialect, and the adapter speaking to the dialect in-process (flags, faults, caps)."""

from __future__ import annotations

import base64

import httpx
import pytest
from fastapi.testclient import TestClient
from provider_contracts import dialect_client, faults, load

from contracts.moderation import Frame, FramesSubject, ImageSubject, ModeratorError, TextSubject, Verdict
from emulator.dialects import openai as dialect
from emulator.flag_marker import image_carries_marker, sample_png
from moderation.openai import DATA_URI_MAX_BYTES, ModerationResponse, OpenAIModerationConfig, OpenAIModerator

KEY = "sk-test-0123456789abcdef"


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode()


MARKED, PLAIN = data_uri(sample_png(marked=True)), data_uri(sample_png(marked=False))


def moderator(client: TestClient | None = None, key: str = KEY, **config) -> OpenAIModerator:  # noqa: ANN003
    base = f"http://testserver/{OpenAIModerator.emulator_prefix}"
    made = OpenAIModerator(OpenAIModerationConfig(api_key=key, base_url=base, **config))
    if client is not None:
        made._client = TestClient(client.app, base_url=base, headers=made._auth_headers())
    return made


def answering(handler) -> OpenAIModerator:  # noqa: ANN001 - httpx handler
    made = moderator()
    made._client = httpx.Client(base_url="http://openai.test", transport=httpx.MockTransport(handler),
                                headers=made._auth_headers())
    return made


def test_the_documented_answer_read_by_the_adapter_and_written_by_the_dialect():
    fixture = load("openai", "moderation_response.json")
    judgement = answering(lambda r: httpx.Response(200, json=fixture)).judge(ImageSubject(url=PLAIN))
    # violence 0.86 >= 0.8 blocks; violence/graphic 0.377 is under its review threshold
    assert (judgement.verdict, judgement.categories) == (Verdict.BLOCK, ("violence",))
    assert judgement.model_version == "omni-moderation-latest" and judgement.evidence.note == "violence: image"
    written = dialect.result_json(["a lamp"], True, True)
    assert set(written) == set(fixture["results"][0])
    assert set(written["categories"]) == set(fixture["results"][0]["categories"])
    ModerationResponse.model_validate({"id": "modr-1", "model": dialect.MODEL_VERSION, "results": [written]})


def test_the_flag_marker_is_found_only_where_drawn():
    assert image_carries_marker(sample_png(marked=True)) and not image_carries_marker(sample_png(marked=False))
    assert image_carries_marker(sample_png(640, 360, marked=True, background=(255, 0, 255)))
    assert not image_carries_marker(sample_png(640, 360, marked=False, background=(255, 0, 255)))


def test_the_adapter_against_the_dialect(tmp_path):
    with dialect_client(tmp_path, "openai") as client:
        openai = moderator(client)
        flagged = openai.judge(TextSubject(text="a lamp with forbidden-content"))
        assert (flagged.verdict, flagged.categories, flagged.model_version) == (
            Verdict.BLOCK, ("illicit",), dialect.MODEL_VERSION)
        assert flagged.scores["illicit"] == 0.97 and flagged.evidence.note == "illicit: text"
        plain = openai.judge(TextSubject(text="a brass lamp on an oak desk"))
        assert plain.verdict is Verdict.ALLOW and plain.categories == ()

        image = openai.judge(ImageSubject(url=MARKED))
        assert (image.verdict, image.categories) == (Verdict.BLOCK, ("violence",))
        assert openai.judge(ImageSubject(url=PLAIN)).verdict is Verdict.ALLOW
        frames = openai.judge(FramesSubject(frames=(Frame(at_s=0.0, url=PLAIN), Frame(at_s=1.5, url=MARKED),
                                                    Frame(at_s=3.0, url=PLAIN))))
        assert frames.verdict is Verdict.BLOCK and frames.evidence.frames_s == (1.5,)

        with pytest.raises(ModeratorError) as unreadable:
            openai.judge(ImageSubject(url="data:image/png;base64," + base64.b64encode(b"not a png").decode()))
        assert not unreadable.value.retryable and unreadable.value.http_status == 400

        keyless = client.post("/openai/v1/moderations", json={"input": "a lamp"})
        assert keyless.status_code == 401 and keyless.json()["error"]["code"] == "invalid_api_key"


@pytest.mark.parametrize(("fault", "status"), [
    ({"submit_status": 429, "submit_status_count": 1}, 429),
    ({"submit_status": 503, "submit_status_count": 1}, 503),
    ({"submit_outage_s": 60}, 503),
])
def test_rate_limits_and_outages_are_retryable_with_the_wait(tmp_path, fault, status):
    with dialect_client(tmp_path, "openai") as client:
        faults(client, dialect="openai", **fault)
        with pytest.raises(ModeratorError) as raised:
            moderator(client).judge(TextSubject(text="a lamp"))
        assert (raised.value.retryable, raised.value.retry_after_s, raised.value.http_status) == (True, 1.0, status)
        assert KEY not in str(raised.value)


def test_oversize_requests_are_refused_before_sending(tmp_path):
    with dialect_client(tmp_path, "openai") as client:
        with pytest.raises(ModeratorError) as small_cap:
            moderator(client, max_image_bytes=len(MARKED) - 1).judge(ImageSubject(url=MARKED))
        huge = "data:image/png;base64," + "A" * DATA_URI_MAX_BYTES
        with pytest.raises(ModeratorError) as api_cap:
            moderator(client).judge(FramesSubject(frames=(Frame(at_s=0, url=PLAIN), Frame(at_s=1, url=huge))))
        with pytest.raises(ModeratorError) as long_text:
            moderator(client, max_text_chars=100).judge(TextSubject(text="a" * 101))
        assert not any(e.value.retryable for e in (small_cap, api_cap, long_text))
        assert client.get("/_sim/stats").json()["sync_calls"] == 0  # nothing reached the emulator
    with pytest.raises(ValueError):
        OpenAIModerationConfig(max_image_bytes=DATA_URI_MAX_BYTES + 1)


def test_final_errors_timeouts_and_an_oversized_answer():
    def refused(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"error": {"message": "Invalid image.", "type": "invalid_request_error"}})

    with pytest.raises(ModeratorError) as bad:
        answering(refused).judge(TextSubject(text="a lamp"))
    assert not bad.value.retryable and "Invalid image." in str(bad.value)

    def timeout(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout(f"no answer for {request.headers['Authorization']}", request=request)

    with pytest.raises(ModeratorError) as slow:
        answering(timeout).judge(TextSubject(text="a lamp"))
    assert slow.value.retryable and KEY not in str(slow.value)

    with pytest.raises(ModeratorError) as big:
        answering(lambda r: httpx.Response(200, content=b" " * (300 * 1024))).judge(TextSubject(text="a lamp"))
    assert not big.value.retryable and "over" in str(big.value)

    with pytest.raises(ModeratorError) as keyless:
        moderator(key="").judge(TextSubject(text="a lamp"))
    assert not keyless.value.retryable


def test_a_category_the_api_marks_is_at_least_review():
    fixture = load("openai", "moderation_response.json")
    result = fixture["results"][0]
    result["categories"]["hate"] = True  # marked, with a score far under our thresholds
    judgement = answering(lambda r: httpx.Response(200, json=fixture)).judge(TextSubject(text="x"))
    assert judgement.categories == ("hate", "violence") and judgement.verdict is Verdict.BLOCK
    result["category_scores"]["violence"] = 0.1
    assert answering(lambda r: httpx.Response(200, json=fixture)).judge(TextSubject(text="x")).verdict is Verdict.REVIEW
