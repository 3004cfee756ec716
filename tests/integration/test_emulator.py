"""The provider emulator, served for real by uvicorn, driven through EmulatorProvider."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import ffmpeg
import httpx
import pytest
import uvicorn

from adapters.media.ffmpeg_tools import probe_json, run_ffmpeg
from adapters.media.transcode import probe
from adapters.providers.base import GenerationRequest, JobState, ProviderError, VideoProvider
from adapters.providers.emulator import EmulatorProvider
from contracts.provider import ErrorClass, JobStatus, SubmitOutcome
from emulator.app import create_app
from emulator.config import EmulatorConfig, new_webhook_secret
from emulator.signing import file_token

pytestmark = pytest.mark.integration

TERMINAL = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELED}
RENDER_SIZE = {"9:16": (540, 960), "16:9": (960, 540), "1:1": (720, 720)}


class LocalSite:
    """Serves the product image and records webhook deliveries (a stand-in for S3 + gateway)."""

    def __init__(self, image: bytes):
        self.image = image
        self.hooks: list[tuple[dict[str, str], bytes]] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.send_header("Content-Length", str(len(site.image)))
                self.end_headers()
                self.wfile.write(site.image)

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                site.hooks.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def events(self, job_id: str) -> list[dict]:
        return [json.loads(body) for _, body in self.hooks if json.loads(body)["id"] == job_id]


@contextmanager
def serve_emulator(data_dir: Path, **params: object) -> Iterator[EmulatorConfig]:
    """Run the emulator app on a free 127.0.0.1 port in a thread; stop it on exit."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = EmulatorConfig(port=port, data_dir=data_dir, **params)
    server = uvicorn.Server(
        uvicorn.Config(create_app(config), log_level="warning", timeout_graceful_shutdown=2, lifespan="on")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "emulator did not start"
        time.sleep(0.02)
    try:
        yield config
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()
        assert not thread.is_alive(), "emulator did not stop"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSite]:
    png = tmp_path_factory.mktemp("site") / "product.png"
    run_ffmpeg(ffmpeg.input("testsrc2=s=320x240", f="lavfi").output(str(png), vframes=1), "test image")
    local = LocalSite(png.read_bytes())
    local.thread.start()
    yield local
    local.server.shutdown()
    local.server.server_close()


@pytest.fixture(scope="module")
def emu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorConfig]:
    secret = new_webhook_secret()
    with serve_emulator(tmp_path_factory.mktemp("emulator"), job_seconds=1, webhook_secret=secret) as config:
        yield config


@pytest.fixture(scope="module")
def provider(emu: EmulatorConfig) -> Iterator[EmulatorProvider]:
    with EmulatorProvider(emu.base_url, "test-key", timeout_s=5, submit_timeout_s=5) as p:
        yield p


@pytest.fixture(autouse=True)
def _no_faults_left(emu: EmulatorConfig) -> Iterator[None]:
    yield
    httpx.delete(f"{emu.base_url}/_sim/faults").raise_for_status()


def request(key: str, site: LocalSite | None = None, **over: object) -> GenerationRequest:
    fields: dict[str, object] = {
        "request_key": key,
        "model": "emu-1",
        "prompt": "a product reel",
        "image_url": f"{site.url}/product.png" if site else None,
        "aspect_ratio": "9:16",
        "duration_s": 2,
        "overlay_lines": ["Trail Runner 3 — light, grippy, waterproof", "€89.00 (-20%)", "100% {recycled} %{pts}"],
    }
    return GenerationRequest(**{**fields, **over})


def wait_for(provider: VideoProvider, job_id: str, timeout_s: float = 30) -> JobState:
    deadline = time.monotonic() + timeout_s
    while (state := provider.get_job(job_id)).status not in TERMINAL:
        assert time.monotonic() < deadline, f"job {job_id} still {state.status}"
        time.sleep(0.2)
    return state


def accepted(provider: VideoProvider, req: GenerationRequest) -> str:
    result = provider.submit(req)
    assert result.outcome == SubmitOutcome.ACCEPTED, result
    assert result.http_status == 201 and result.job_id
    return result.job_id


def sim_jobs(emu: EmulatorConfig) -> list[dict]:
    return httpx.get(f"{emu.base_url}/_sim/jobs").json()["jobs"]


def set_faults(emu: EmulatorConfig, **faults: int) -> None:
    httpx.post(f"{emu.base_url}/_sim/faults", json=faults).raise_for_status()


@pytest.fixture(scope="module")
def rendered(provider: EmulatorProvider, site: LocalSite) -> dict[str, JobState]:
    """One job per ratio, submitted together (two render at once), polled to the end."""
    ids = {
        ratio: accepted(provider, request(f"render-{ratio}", site, aspect_ratio=ratio, webhook_url=f"{site.url}/hooks"))
        for ratio in RENDER_SIZE
    }
    return {ratio: wait_for(provider, job_id) for ratio, job_id in ids.items()}


@pytest.mark.parametrize("ratio", list(RENDER_SIZE))
def test_renders_a_real_video(rendered: dict[str, JobState], ratio: str, tmp_path: Path) -> None:
    state = rendered[ratio]
    assert state.status == JobStatus.SUCCEEDED and state.raw_status == "succeeded"
    assert state.progress == 1.0 and state.request_key == f"render-{ratio}"
    assert state.usage and state.usage.seconds == 2 and state.usage.cost == pytest.approx(2.0)
    [output] = state.outputs
    assert output.expires_at and output.expires_at.timestamp() > time.time() + 3000
    video = tmp_path / "out.mp4"
    resp = httpx.get(output.url)
    assert resp.status_code == 200 and resp.headers["content-type"] == "video/mp4"
    video.write_bytes(resp.content)
    info = probe(video)
    assert info.video_codec == "h264" and info.audio_codec == "aac"
    assert (info.width, info.height) == RENDER_SIZE[ratio]
    assert info.duration_s == pytest.approx(2, rel=0.1)


def test_lists_jobs_by_request_key(provider: EmulatorProvider, rendered: dict[str, JobState]) -> None:
    [found] = provider.find_by_request_key("render-1:1")
    assert found.job_id == rendered["1:1"].job_id and found.status == JobStatus.SUCCEEDED
    assert provider.find_by_request_key("no-such-key") == []


def test_lists_the_jobs_of_a_window_a_page_at_a_time_without_the_dialects(
    emu: EmulatorConfig, provider: EmulatorProvider, site: LocalSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The provider backstop's listing: every job of the emulator's own API created since a moment,
    across pages, oldest first; a dialect's jobs (another provider's) are not among them."""
    import adapters.providers.emulator as emulator_module

    since = datetime.now(UTC) - timedelta(seconds=1)
    mine = [accepted(provider, request(f"window-{i}")) for i in range(3)]
    runway = httpx.post(f"{emu.base_url}/runway/v1/image_to_video", timeout=10,
                        headers={"Authorization": "Bearer k", "X-Runway-Version": "2024-11-06"},
                        json={"model": "gen4_turbo", "promptImage": f"{site.url}/product.png", "promptText": "x",
                              "ratio": "720:1280", "duration": 5})
    assert runway.status_code == 200, runway.text
    monkeypatch.setattr(emulator_module, "LIST_PAGE_MAX", 2)  # two pages for three jobs
    listed = [j.job_id for j in provider.list_jobs(since)]
    assert listed == mine and runway.json()["id"] not in listed
    assert [j.job_id for j in provider.list_jobs(datetime.now(UTC) + timedelta(minutes=1))] == []
    refused = httpx.get(f"{emu.base_url}/v1/jobs", headers={"Authorization": "Bearer k"}, timeout=10)
    assert refused.status_code == 400 and "created_after" in refused.text


def test_webhooks_are_signed_and_follow_each_status(
    emu: EmulatorConfig, site: LocalSite, rendered: dict[str, JobState]
) -> None:
    job_id = rendered["9:16"].job_id
    deadline = time.monotonic() + 10
    while [e["status"] for e in site.events(job_id)] != ["queued", "running", "succeeded"]:
        assert time.monotonic() < deadline, site.events(job_id)
        time.sleep(0.1)
    key = base64.b64decode(emu.webhook_secret.removeprefix("whsec_"))
    for headers, body in site.hooks:
        signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
        expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
        assert headers["webhook-signature"] == f"v1,{expected}"
        assert abs(int(headers["webhook-timestamp"]) - time.time()) < 300


def test_output_url_is_signed_and_expires(emu: EmulatorConfig, rendered: dict[str, JobState]) -> None:
    job_id = rendered["1:1"].job_id
    url = rendered["1:1"].outputs[0].url
    base = f"{emu.base_url}/files/{job_id}"
    expired = file_token(emu.url_secret, job_id, int(time.time()) - 1)
    assert httpx.get(f"{base}/{expired}.mp4").status_code == 403
    tampered = url[:-5] + ("0" if url[-5] != "0" else "1") + ".mp4"
    assert httpx.get(tampered).status_code == 403
    other_job = rendered["9:16"].job_id
    assert httpx.get(url.replace(job_id, other_job)).status_code == 403
    assert httpx.get(url).status_code == 200


def test_expire_output_urls_fault_kills_the_next_urls_only(
    emu: EmulatorConfig, provider: EmulatorProvider, rendered: dict[str, JobState]
) -> None:
    job_id = rendered["1:1"].job_id
    httpx.post(f"{emu.base_url}/_sim/faults", json={"expire_output_urls": 1}, timeout=10).raise_for_status()
    try:
        dead = provider.get_job(job_id).outputs[0]
        fresh = provider.get_job(job_id).outputs[0]
    finally:
        httpx.delete(f"{emu.base_url}/_sim/faults", timeout=10)
    assert dead.expires_at and dead.expires_at.timestamp() > time.time() + 600  # it does not say so
    assert httpx.get(dead.url).status_code == 403
    assert httpx.get(fresh.url).status_code == 200
    assert provider.capabilities.output_domains == ["127.0.0.1"]


def test_fault_rates_over_http_are_applied_and_counted(
    emu: EmulatorConfig, provider: EmulatorProvider, rendered: dict[str, JobState]
) -> None:
    """Rates of 1 make every submit a 5xx and every output URL dead; the stats count each, and a
    total outage refuses submits as well as status calls."""
    httpx.delete(f"{emu.base_url}/_sim/stats").raise_for_status()
    before = len(sim_jobs(emu))
    rates = {"seed": 3, "submit_5xx": 1.0, "expire_output_url": 1.0}
    httpx.post(f"{emu.base_url}/_sim/faults", json={"rates": rates}, timeout=10).raise_for_status()
    assert httpx.get(f"{emu.base_url}/_sim/faults").json()["rates"]["submit_5xx"] == 1.0
    results = [provider.submit(request(f"rated-{i}")) for i in range(3)]
    assert {r.http_status for r in results} <= {500, 502, 503}, results
    assert all(r.outcome == SubmitOutcome.REJECTED_RETRYABLE for r in results)
    dead = provider.get_job(rendered["1:1"].job_id).outputs[0]
    assert httpx.get(dead.url).status_code == 403
    set_faults(emu, submit_outage_s=30, status_outage_s=30)
    assert provider.submit(request("in-outage")).http_status == 503
    seen = stats(emu)
    assert (seen["injected_5xx"], seen["output_urls_expired"], seen["outage_refusals"]) == (3, 1, 1), seen
    assert len(sim_jobs(emu)) == before
    httpx.delete(f"{emu.base_url}/_sim/faults").raise_for_status()
    assert httpx.get(provider.get_job(rendered["1:1"].job_id).outputs[0].url).status_code == 200


RUNWAY_HEADERS = {"Authorization": "Bearer test-key", "X-Runway-Version": "2024-11-06"}


def test_faults_scoped_to_one_dialect_leave_the_others_answering(
    emu: EmulatorConfig, provider: EmulatorProvider, site: LocalSite
) -> None:
    """Runway's dialect down (submits and status calls) while the emulator's own API answers; then
    the emulator's own API refusing submits while Runway's answers."""
    runway = f"{emu.base_url}/runway/v1"
    body = {"model": "gen4_turbo", "promptImage": f"{site.url}/product.png", "ratio": "720:1280", "duration": 2}
    before = httpx.post(f"{runway}/image_to_video", json=body, headers=RUNWAY_HEADERS)
    assert before.status_code == 200, before.text
    scoped = httpx.post(f"{emu.base_url}/_sim/faults",
                        json={"dialect": "runway", "submit_outage_s": 60, "status_outage_s": 60})
    assert scoped.status_code == 200 and scoped.json()["dialect"] == "runway"
    assert httpx.get(f"{emu.base_url}/_sim/faults").json()["submit_outage_s"] == 0  # not set for all
    assert httpx.get(f"{emu.base_url}/_sim/faults", params={"dialect": "runway"}).json()["submit_outage_s"] > 0

    down = httpx.post(f"{runway}/image_to_video", json=body, headers=RUNWAY_HEADERS)
    assert down.status_code == 503 and down.headers["Retry-After"] == "1", down.text
    status = httpx.get(f"{runway}/tasks/{before.json()['id']}", headers=RUNWAY_HEADERS)
    assert status.status_code == 503, status.text
    own = accepted(provider, request("scoped-own", site))
    assert provider.get_job(own).status in {JobStatus.QUEUED, JobStatus.THROTTLED, JobStatus.RUNNING}

    httpx.delete(f"{emu.base_url}/_sim/faults").raise_for_status()
    set_faults(emu, dialect="emulator", submit_status=429, submit_status_count=1)
    refused = provider.submit(request("scoped-refused", site))
    assert refused.outcome == SubmitOutcome.REJECTED_RETRYABLE and refused.http_status == 429, refused
    answered = httpx.post(f"{runway}/image_to_video", json=body, headers=RUNWAY_HEADERS)
    assert answered.status_code == 200, answered.text
    assert httpx.get(f"{runway}/tasks/{answered.json()['id']}", headers=RUNWAY_HEADERS).status_code == 200
    assert not [j for j in sim_jobs(emu) if j["request_key"] == "scoped-refused"]


@pytest.mark.parametrize(("faults", "says"), [
    ({"dialect": "pika", "fail_next": 1}, "'pika'"),
    ({"dialect": "kling", "max_running": 1}, "tuning is for the whole emulator"),
])
def test_faults_for_an_unknown_dialect_or_tuning_one_are_refused(emu: EmulatorConfig, faults: dict, says: str) -> None:
    answer = httpx.post(f"{emu.base_url}/_sim/faults", json=faults)
    assert answer.status_code == 422 and says in answer.text, answer.text
    assert httpx.get(f"{emu.base_url}/_sim/faults", params={"dialect": "pika"}).status_code == 422


def test_invalid_request_is_rejected_for_good(emu: EmulatorConfig, provider: EmulatorProvider) -> None:
    before = len(sim_jobs(emu))
    result = provider.submit(request("bad-ratio", aspect_ratio="4:3"))
    assert result.outcome == SubmitOutcome.REJECTED_FINAL
    assert result.error_class == ErrorClass.NON_RETRYABLE and result.http_status == 422
    assert "aspect_ratio" in (result.error_message or "")
    assert len(sim_jobs(emu)) == before


def test_unknown_outcome_is_reconciled_by_request_key(emu: EmulatorConfig, site: LocalSite) -> None:
    before = len(sim_jobs(emu))
    set_faults(emu, submit_hang_after_create=1)
    with EmulatorProvider(emu.base_url, "test-key", submit_timeout_s=0.5) as impatient:
        started = time.monotonic()
        result = impatient.submit(request("hang-1", site))
        assert time.monotonic() - started < 3
        assert result.outcome == SubmitOutcome.UNKNOWN
        assert result.error_class == ErrorClass.UNKNOWN_OUTCOME and result.job_id is None
        [found] = impatient.find_by_request_key("hang-1")
    assert len(sim_jobs(emu)) == before + 1, "the job exists although the client never heard of it"
    assert found.status in {JobStatus.QUEUED, JobStatus.THROTTLED, JobStatus.RUNNING, JobStatus.SUCCEEDED}


def test_resubmitting_a_key_creates_a_second_job(provider: EmulatorProvider) -> None:
    first = accepted(provider, request("twice"))
    second = accepted(provider, request("twice"))
    assert first != second
    assert {s.job_id for s in provider.find_by_request_key("twice")} == {first, second}


def test_injected_status_is_retryable_without_a_job(emu: EmulatorConfig, provider: EmulatorProvider) -> None:
    before = len(sim_jobs(emu))
    set_faults(emu, submit_status=503, submit_status_count=1)
    result = provider.submit(request("busy"))
    assert result.outcome == SubmitOutcome.REJECTED_RETRYABLE and result.http_status == 503
    assert result.error_class == ErrorClass.RETRYABLE and result.retry_after_s == 1.0
    assert len(sim_jobs(emu)) == before
    accepted(provider, request("busy"))  # the fault was used up


def test_connect_error_is_retryable_and_query_errors_raise() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens here
    with EmulatorProvider(f"http://127.0.0.1:{port}", "test-key", timeout_s=2) as nowhere:
        result = nowhere.submit(request("offline"))
        assert result.outcome == SubmitOutcome.REJECTED_RETRYABLE
        assert result.error_class == ErrorClass.RETRYABLE
        with pytest.raises(ProviderError) as err:
            nowhere.get_job("job_x")
        assert err.value.retryable


def test_unknown_job_is_a_final_provider_error(provider: EmulatorProvider) -> None:
    with pytest.raises(ProviderError) as err:
        provider.get_job("job_does_not_exist")
    assert not err.value.retryable and err.value.http_status == 404


def test_fail_next_fails_the_job(emu: EmulatorConfig, provider: EmulatorProvider, site: LocalSite) -> None:
    set_faults(emu, fail_next=1)
    state = wait_for(provider, accepted(provider, request("doomed", site)))
    assert state.status == JobStatus.FAILED and state.error_class == ErrorClass.RETRYABLE
    assert "INTERNAL.SIMULATED_FAILURE" in (state.error_message or "")
    assert state.outputs == [] and state.usage is None


def test_unreachable_image_fails_the_job_retryably(provider: EmulatorProvider) -> None:
    """The image is ours (in our storage, validated on import): a new attempt with a fresh link may
    reach it, as after a storage restart."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    state = wait_for(provider, accepted(provider, request("no-image", image_url=f"http://127.0.0.1:{port}/x.png")))
    assert state.status == JobStatus.FAILED and state.error_class == ErrorClass.RETRYABLE
    assert (state.error_message or "").startswith("INPUT.IMAGE_UNREACHABLE")


def test_cancel_is_sticky_and_leaves_finished_jobs_alone(
    provider: EmulatorProvider, site: LocalSite, rendered: dict[str, JobState]
) -> None:
    job_id = accepted(provider, request("cancel-me", site, duration_s=4))
    assert provider.cancel(job_id).status == JobStatus.CANCELED
    time.sleep(2.5)  # past job_seconds and the render: a late finish must not win
    assert provider.get_job(job_id).status == JobStatus.CANCELED
    assert provider.cancel(job_id).status == JobStatus.CANCELED
    done = rendered["16:9"].job_id
    assert provider.cancel(done).status == JobStatus.SUCCEEDED


def test_jobs_survive_a_restart(tmp_path: Path, site: LocalSite) -> None:
    data_dir = tmp_path / "emu"
    with (
        serve_emulator(data_dir, job_seconds=60, max_running=1) as first,
        EmulatorProvider(first.base_url, "k") as p,
    ):
        running = accepted(p, request("restart-running", site, duration_s=1))
        queued = accepted(p, request("restart-queued", site, duration_s=1))
        deadline = time.monotonic() + 10
        while p.get_job(running).status != JobStatus.RUNNING:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        while p.get_job(queued).status != JobStatus.THROTTLED:  # over max_running
            assert time.monotonic() < deadline
            time.sleep(0.1)
    with serve_emulator(data_dir, job_seconds=0.5) as second, EmulatorProvider(second.base_url, "k") as p:
        for job_id in (running, queued):
            state = wait_for(p, job_id)
            assert state.status == JobStatus.SUCCEEDED
            assert httpx.get(state.outputs[0].url).status_code == 200
        renders = {j["id"]: j["renders"] for j in sim_jobs(second)}
        assert renders == {running: 2, queued: 1}, "the interrupted job was produced again"


# -- a provider under load: running limit, queue limit, render cache, fast render ----------------


def stats(config: EmulatorConfig) -> dict:
    return httpx.get(f"{config.base_url}/_sim/stats").json()


def wait_until(check: Callable[[], bool], timeout_s: float = 15, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_running_limit_throttles_the_rest(tmp_path: Path, site: LocalSite) -> None:
    with (
        serve_emulator(tmp_path / "emu", max_running=2, job_seconds=1, render="fast") as emu_,
        EmulatorProvider(emu_.base_url, "k") as p,
    ):
        hooks = f"{site.url}/hooks"
        ids = [accepted(p, request(f"limit-{i}", site, webhook_url=hooks)) for i in range(5)]
        wait_until(lambda: p.get_job(ids[-1]).status == JobStatus.THROTTLED, what="a throttled job")
        states = [wait_for(p, job_id) for job_id in ids]
        assert {s.status for s in states} == {JobStatus.SUCCEEDED}
        wait_until(lambda: stats(emu_)["webhooks_sent"] == 2 * 3 + 3 * 4, what="every webhook")
        seen = stats(emu_)
    paths = [[e["status"] for e in site.events(job_id)] for job_id in ids]
    assert paths[:2] == [["queued", "running", "succeeded"]] * 2
    assert paths[2:] == [["queued", "throttled", "running", "succeeded"]] * 3
    assert seen["max_running"] == 2 and seen["max_alive"] == 5 and seen["jobs_created"] == 5
    assert seen["status_calls"] >= 5
    assert seen["status_calls_per_job"] == pytest.approx(seen["status_calls"] / 5, abs=1e-3)


def test_submit_answers_429_once_max_queued_jobs_wait(tmp_path: Path) -> None:
    with (
        serve_emulator(tmp_path / "emu", max_running=1, max_queued=2, job_seconds=60, render="fast") as emu_,
        EmulatorProvider(emu_.base_url, "k") as p,
    ):
        first = accepted(p, request("q-0"))
        wait_until(lambda: p.get_job(first).status == JobStatus.RUNNING, what="the first job to run")
        waiting = [accepted(p, request(f"q-{i}")) for i in (1, 2)]
        refused = p.submit(request("q-3"))
        assert refused.outcome == SubmitOutcome.REJECTED_RETRYABLE and refused.http_status == 429
        assert refused.retry_after_s == 1.0 and "RATE_LIMIT.QUEUE_FULL" in (refused.error_message or "")
        set_faults(emu_, max_queued=3)  # runtime tuning: one more may wait
        waiting.append(accepted(p, request("q-3")))
        httpx.delete(f"{emu_.base_url}/_sim/faults").raise_for_status()  # back to --max-queued 2
        assert p.submit(request("q-4")).http_status == 429
        assert stats(emu_)["refused_429"] == 2
        assert {p.get_job(j).status for j in waiting} == {JobStatus.THROTTLED}
        assert p.cancel(waiting[0]).status == JobStatus.CANCELED  # cancel works while throttled
        set_faults(emu_, max_running=5)  # runtime tuning: the waiting jobs start at once
        wait_until(lambda: {p.get_job(j).status for j in waiting[1:]} == {JobStatus.RUNNING}, what="running")


def test_render_cache_serves_an_identical_job(emu: EmulatorConfig, provider: EmulatorProvider, site: LocalSite) -> None:
    httpx.delete(f"{emu.base_url}/_sim/stats").raise_for_status()
    lines = [f"cache probe {time.time_ns()}"]  # inputs no other test rendered
    first = wait_for(provider, accepted(provider, request("cache-1", site, overlay_lines=lines)))
    second = wait_for(provider, accepted(provider, request("cache-2", site, overlay_lines=lines)))
    assert first.status == second.status == JobStatus.SUCCEEDED
    seen = stats(emu)
    assert (seen["renders"], seen["render_cache_hits"]) == (1, 1)
    assert httpx.get(first.outputs[0].url).content == httpx.get(second.outputs[0].url).content
    other = wait_for(provider, accepted(provider, request("cache-3", site, overlay_lines=[*lines, "more"])))
    assert other.status == JobStatus.SUCCEEDED and stats(emu)["renders"] == 2, "other text: a new render"


@pytest.mark.parametrize(("ratio", "size", "duration_s"), [("9:16", (180, 320), 3), ("16:9", (320, 180), 1.5)])
def test_fast_render_is_a_small_valid_clip(
    tmp_path: Path, site: LocalSite, ratio: str, size: tuple[int, int], duration_s: float
) -> None:
    with (
        serve_emulator(tmp_path / "emu", job_seconds=0, render="fast") as emu_,
        EmulatorProvider(emu_.base_url, "k") as p,
    ):
        state = wait_for(p, accepted(p, request("fast", site, aspect_ratio=ratio, duration_s=duration_s)))
        assert state.status == JobStatus.SUCCEEDED
        video = tmp_path / "fast.mp4"
        video.write_bytes(httpx.get(state.outputs[0].url).content)
    data = probe_json(video)
    v = next(s for s in data["streams"] if s["codec_type"] == "video")
    a = next(s for s in data["streams"] if s["codec_type"] == "audio")
    assert (v["codec_name"], a["codec_name"]) == ("h264", "aac")
    assert (v["width"], v["height"]) == size and v["r_frame_rate"] == "10/1"
    assert float(data["format"]["duration"]) == pytest.approx(duration_s, abs=0.05)
    assert float(v["duration"]) == pytest.approx(duration_s, abs=0.01)
