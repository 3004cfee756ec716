"""The tenant studio (/app) on the real stack, driven in headless Chromium at 360 px wide.

A new tenant signs in with its key (the page keeps a session token, never the key), uploads a PNG
(the bytes go to S3 through the bucket's CORS, never through the gateway), creates a generation
with a double click while the first request is in flight and the test dropping the network on the
answer (one task, one RESERVE), follows it live to SUCCEEDED and plays it; a second tenant sees
none of it. A second run cuts the network for 5 s mid-generation: the page resumes the stream
with Last-Event-ID and shows every state once. A third cancels a long clip from the page.

Needs Debian's `chromium` (/usr/bin/chromium) and the `playwright` package (test extra); without
them the tests skip. `REELQUEUE_DOCS_SCREENSHOT=1` also writes docs/studio.png.
"""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from cli_helpers import run_cli_async
from cut_proxy import CuttableProxy
from sqlalchemy import func, select
from stack_helpers import gateway_log_after, serving, wait_for_status
from test_review_gallery import BROWSER_ARGS, CHROMIUM, _browser_or_skip

from schema.db import Database
from schema.models import CreditEntry, IdempotencyRecord, StateEvent, Task

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

IMAGE = Path(__file__).resolve().parents[2] / "examples" / "images" / "aurora-lamp.png"
DOCS_SHOT = Path(__file__).resolve().parents[2] / "docs" / "studio.png"
WRITE_DOCS_SHOT = os.environ.get("REELQUEUE_DOCS_SCREENSHOT") == "1"  # read now: the stack fixture clears REELQUEUE_*
PHONE = {"width": 360, "height": 780}
TERMINAL = {"SUCCEEDED", "CANCELED", "REJECTED", "FAILED_FINAL", "EXPIRED"}


@pytest.fixture
async def browser() -> AsyncIterator:
    async_playwright = _browser_or_skip()
    async with async_playwright() as pw:
        launched = await pw.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_ARGS)
        yield launched
        await launched.close()


@pytest.fixture
async def gateway_worker(stack, client) -> AsyncIterator[None]:
    """The `dev up` gateway starts workflows on the stack's task queue: a worker serves it meanwhile."""
    async with serving(client, stack, stack.task_queue):
        yield


async def _tenant() -> tuple[str, str]:
    made = await run_cli_async("tenants", "create", f"studio-{uuid.uuid4().hex[:10]}", "--json")
    assert made.code == 0, made.stdout + made.stderr
    return made.json["tenant_id"], made.json["api_key"]


class Seen:
    """What the page sent and got, from the browser's side."""

    def __init__(self, page):  # noqa: ANN001 - playwright Page
        self.requests: list = []
        self.responses: list = []
        page.on("request", lambda request: self.requests.append(request))
        page.on("response", lambda response: self.responses.append(response))

    def sent(self, method: str, path: str) -> list:
        return [r for r in self.requests if r.method == method and urlsplit(r.url).path == path]


async def _signed_in(browser, stack, key: str, proxy: str | None = None):  # noqa: ANN001, ANN202
    from playwright.async_api import expect

    context = await browser.new_context(viewport=PHONE, **({"proxy": {"server": proxy}} if proxy else {}))
    page = await context.new_page()
    seen = Seen(page)
    await page.goto(f"{stack.gateway_url}/app")
    await page.get_by_test_id("api-key").fill(key)
    await page.get_by_test_id("sign-in").click()
    await expect(page.get_by_test_id("image-file")).to_be_visible()
    await expect(page.locator("#who")).to_contain_text("credits left")
    return context, page, seen


async def _upload(page) -> str:  # noqa: ANN001
    from playwright.async_api import expect

    await page.get_by_test_id("image-file").set_input_files(str(IMAGE))
    await expect(page.get_by_test_id("upload-status")).to_contain_text("READY", timeout=60_000)
    return await page.evaluate("() => document.querySelector('#upload-progress').value")


async def _drop(page, name: str, data: bytes, mime: str) -> None:  # noqa: ANN001
    """A file dropped on the page's drop zone, as a drag from the desktop delivers it."""
    await page.evaluate("""([name, b64, mime]) => {
        const bytes = Uint8Array.from(atob(b64), c => c.charCodeAt(0));
        const files = new DataTransfer();
        files.items.add(new File([bytes], name, {type: mime}));
        document.querySelector('#drop').dispatchEvent(
            new DragEvent('drop', {dataTransfer: files, bubbles: true, cancelable: true}));
    }""", [name, base64.b64encode(data).decode(), mime])


async def _states_until_end(page, timeout_s: float = 120) -> list[str]:  # noqa: ANN001
    """The status element's values as the test saw them change (sampled every 20 ms)."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = (await page.get_by_test_id("status").inner_text()).strip()
        if text and (not seen or seen[-1] != text):
            seen.append(text)
        if text in TERMINAL:
            return seen
        await asyncio.sleep(0.02)
    pytest.fail(f"the page never showed an end state; it showed {seen}")


def _events(db: Database, task_id: str) -> list[str]:
    with db.transaction() as session:
        return list(session.scalars(select(StateEvent.to_status).where(StateEvent.task_id == task_id,
                                                                       StateEvent.applied)
                                    .order_by(StateEvent.id)))


async def _fits(page) -> None:  # noqa: ANN001
    """Nothing wider than the phone's screen (no sideways scrolling); names what sticks out."""
    wide = await page.evaluate("""() => [...document.querySelectorAll('body *')]
        .filter(e => e.getBoundingClientRect().right > window.innerWidth + 0.5 && e.getClientRects().length)
        .map(e => `${e.tagName}#${e.id}.${e.className}: ${e.getBoundingClientRect().right}`)""")
    assert await page.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"], wide


async def _moved_on(db: Database, task_id: str, shown: int, timeout_s: float = 60) -> None:
    """Until the task has more state events than the page shows."""
    deadline = time.monotonic() + timeout_s
    while len(_events(db, task_id)) <= shown:
        assert time.monotonic() < deadline, "the task made no progress during the cut"
        await asyncio.sleep(0.1)


async def _timeline(page) -> list[str]:  # noqa: ANN001
    return await page.locator("#timeline li").evaluate_all("items => items.map(i => i.dataset.state)")


async def _plays(page, seconds: float = 0.3, timeout_s: float = 60) -> None:  # noqa: ANN001
    """The video element's currentTime advances past `seconds` (its state named if it does not)."""
    video = "document.querySelector('[data-testid=player]')"
    await page.evaluate(f"() => {video}.play()")
    deadline = time.monotonic() + timeout_s
    while (await page.evaluate(f"() => {video}.currentTime")) <= seconds:
        state = await page.evaluate("() => { const v = document.querySelector('[data-testid=player]'); return {"
                                    "src: v.currentSrc.slice(0, 60), ready: v.readyState, network: v.networkState,"
                                    " paused: v.paused, error: v.error && v.error.message} }")
        assert time.monotonic() < deadline, f"the video did not play: {state}"
        await asyncio.sleep(0.1)


def _count(db: Database, model, *where) -> int:  # noqa: ANN001
    with db.transaction() as session:
        return session.scalar(select(func.count()).select_from(model).where(*where))


async def test_studio_uploads_creates_once_follows_and_plays(stack, browser, gateway_worker, tmp_path) -> None:
    from playwright.async_api import expect

    db = Database(stack.database_url)
    tenant, key = await _tenant()
    _, other_key = await _tenant()
    context, page, seen = await _signed_in(browser, stack, key)
    stored = await page.evaluate("() => JSON.stringify(sessionStorage)")
    assert key not in stored and "rqs_" in stored  # a session token, never the key
    assert await page.get_by_test_id("api-key").input_value() == ""
    await _fits(page)

    # Upload: sha256 in the page, PUT straight to S3 (CORS), complete; the gateway sees no PUT.
    assert await _upload(page) == 100
    [ticket] = seen.sent("POST", "/v1/uploads")
    asset_id = (await (await ticket.response()).json())["id"]
    [put] = [r for r in seen.requests if r.method == "PUT"]
    assert urlsplit(put.url).netloc == stack.s3_endpoint and asset_id in put.url
    assert (await put.response()).status == 200
    log = gateway_log_after(stack, f"/v1/uploads/{asset_id}/complete")
    assert f"/v1/uploads/{asset_id}/complete" in log
    assert not [line for line in log.splitlines() if "PUT " in line and (asset_id in line or tenant in line)]

    # Create: a double click while the first request is in flight, and that request's answer lost
    # to a dropped connection (the task was created): the page retries with the same key.
    await page.get_by_test_id("prompt").fill("A lamp on a desk, slow pan")
    clicked = asyncio.Event()
    dropped = []

    async def drop_first_answer(route) -> None:  # noqa: ANN001
        if dropped or route.request.method != "POST":
            await route.continue_()
            return
        dropped.append(route.request)
        await clicked.wait()  # the second click lands while this request is still in flight
        await route.fetch()  # the gateway creates the task and answers ...
        await route.abort("internetdisconnected")  # ... but the answer never reaches the page

    await page.route("**/v1/generations", drop_first_answer)
    await page.get_by_test_id("create").dblclick()
    clicked.set()
    states = await _states_until_end(page)
    assert states[-1] == "SUCCEEDED", states
    creates = seen.sent("POST", "/v1/generations")
    assert len(creates) == 2, [r.headers for r in creates]  # the dropped one and its retry, no third
    assert len({r.headers["idempotency-key"] for r in creates}) == 1
    replay = await creates[1].response()
    assert replay.status == 202 and replay.headers.get("idempotent-replayed") == "true"
    task_id = (await replay.json())["id"]
    assert _count(db, Task, Task.tenant_id == tenant) == 1
    assert _count(db, CreditEntry, CreditEntry.task_id == task_id, CreditEntry.entry_type == "RESERVE") == 1
    assert _count(db, IdempotencyRecord, IdempotencyRecord.tenant_id == tenant) == 1

    # Live: the status showed states before the end, and the timeline has every state once, in order.
    events = _events(db, task_id)
    assert len([s for s in states if s not in TERMINAL]) >= 2, states
    assert states == [s for s in events if s in states] and len(set(states)) == len(states)
    await expect(page.locator("#timeline li")).to_have_count(len(events))
    assert await _timeline(page) == events
    await _plays(page)
    await expect(page.get_by_test_id("attempts")).to_have_text("1")
    await expect(page.get_by_test_id("cost")).to_contain_text("credits")
    await expect(page.get_by_test_id("cancel")).to_be_hidden()
    await expect(page.locator("#list li")).to_have_count(1)
    await _fits(page)
    shot = tmp_path / "studio.png"
    await page.set_viewport_size({"width": 960, "height": 900})
    await page.screenshot(path=str(shot), full_page=True)
    if WRITE_DOCS_SHOT:
        shutil.copy(shot, DOCS_SHOT)
    await context.close()

    # A second tenant sees none of it: an empty list, and 404 for the task, its events and the upload.
    context, page, _ = await _signed_in(browser, stack, other_key)
    await expect(page.locator("#list li")).to_have_count(0)
    await context.close()
    other = {"Authorization": f"Bearer {other_key}"}
    with httpx.Client(base_url=stack.gateway_url, headers=other, timeout=10) as http:
        for path in (f"/v1/generations/{task_id}", f"/v1/events?task_id={task_id}", f"/v1/assets/{asset_id}"):
            assert http.get(path).status_code == 404, path


async def test_studio_resumes_the_stream_after_the_network_is_cut(stack, browser, gateway_worker) -> None:
    """The browser reaches the stack through a proxy the test cuts: open connections drop, new ones
    are refused, for 5 s while the generation runs (Chromium's offline mode leaves a stream open)."""
    from playwright.async_api import expect

    db = Database(stack.database_url)
    _, key = await _tenant()
    httpx.post(f"{stack.emulator_url}/_sim/faults", json={"job_seconds": 4}, timeout=10).raise_for_status()
    try:
        async with CuttableProxy() as network:
            context, page, seen = await _signed_in(browser, stack, key, proxy=network.url)
            await _drop(page, "lamp.png", IMAGE.read_bytes(), "image/png")  # drag and drop, this time
            await expect(page.get_by_test_id("upload-status")).to_contain_text("READY", timeout=60_000)
            await page.get_by_test_id("prompt").fill("A scarf in the wind")
            await page.get_by_test_id("create").click()
            await expect(page.get_by_test_id("status")).to_have_text("RUNNING", timeout=60_000)
            before = len(seen.requests)
            network.cut()
            cut_at = time.monotonic()
            await expect(page.get_by_test_id("live")).to_contain_text("reconnecting", timeout=10_000)
            task_id = await page.locator("#gen-id").inner_text()
            shown = len(await _timeline(page))
            await _moved_on(db, task_id, shown)  # states the page missed while cut off
            await asyncio.sleep(max(0.0, 5 - (time.monotonic() - cut_at)))  # a cut of 5 s at least
            assert network.refused > 0  # the page kept trying
            network.restore()
            await expect(page.get_by_test_id("status")).to_have_text("SUCCEEDED", timeout=60_000)
            events = _events(db, task_id)
            await expect(page.locator("#timeline li")).to_have_count(len(events))
            assert await _timeline(page) == events  # every state once, in order, across the cut
            resumed = [r for r in seen.requests[before:] if urlsplit(r.url).path == "/v1/events"
                       and r.headers.get("accept") == "text/event-stream" and r.headers.get("last-event-id")]
            assert resumed, "the page did not resume the stream with Last-Event-ID"
            await expect(page.get_by_test_id("cost")).to_contain_text("credits")  # read again once back
            await expect(page.get_by_test_id("error")).to_be_hidden()
            await _plays(page)
            await context.close()
    finally:
        httpx.delete(f"{stack.emulator_url}/_sim/faults", timeout=10)


async def test_studio_cancels_a_running_generation(stack, browser, gateway_worker) -> None:
    from playwright.async_api import expect

    db = Database(stack.database_url)
    _, key = await _tenant()
    httpx.post(f"{stack.emulator_url}/_sim/faults", json={"job_seconds": 60}, timeout=10).raise_for_status()
    try:
        context, page, _ = await _signed_in(browser, stack, key)
        await _upload(page)
        await page.get_by_test_id("prompt").fill("A mug on a table")
        await page.get_by_test_id("create").click()
        await expect(page.get_by_test_id("status")).to_have_text("RUNNING", timeout=60_000)
        await page.get_by_test_id("cancel").focus()
        await page.keyboard.press("Enter")  # keyboard operable
        await expect(page.get_by_test_id("status")).to_have_text("CANCELED", timeout=60_000)
    finally:
        httpx.delete(f"{stack.emulator_url}/_sim/faults", timeout=10)
    task_id = await page.locator("#gen-id").inner_text()
    assert _events(db, task_id)[-1] == "CANCELED"
    await expect(page.get_by_test_id("cancel")).to_be_hidden()
    await context.close()


async def test_studio_uploads_a_large_image_in_parts(stack, browser, tmp_path) -> None:
    """Over 16 MiB an upload is multipart: each part PUT straight to S3, its ETag read back through
    the bucket's CORS (ExposeHeaders), the parts named on complete."""
    from PIL import Image
    from playwright.async_api import expect

    noise = tmp_path / "noise.png"
    Image.frombytes("RGB", (2400, 2400), os.urandom(2400 * 2400 * 3)).save(noise, compress_level=0)
    assert noise.stat().st_size > 16 * 1024 * 1024
    _, key = await _tenant()
    context, page, seen = await _signed_in(browser, stack, key)
    await page.get_by_test_id("image-file").set_input_files(str(noise))
    await expect(page.get_by_test_id("upload-status")).to_contain_text("READY", timeout=120_000)
    parts = [r for r in seen.requests if r.method == "PUT"]
    assert len(parts) == 3 and all("partNumber=" in r.url and urlsplit(r.url).netloc == stack.s3_endpoint
                                   for r in parts)
    [complete] = [r for r in seen.requests if r.method == "POST" and r.url.endswith("/complete")]
    sent = complete.post_data_json["parts"]
    assert [p["part_number"] for p in sent] == [1, 2, 3] and all(p["etag"] for p in sent)
    await context.close()


async def test_studio_shows_refusals_with_their_problem_type(stack, browser) -> None:
    from playwright.async_api import expect

    context = await browser.new_context(viewport=PHONE)
    page = await context.new_page()
    await page.goto(f"{stack.gateway_url}/app")
    await page.get_by_test_id("api-key").fill("rq_" + "x" * 43)
    await page.keyboard.press("Enter")  # the form submits from the keyboard
    await expect(page.get_by_test_id("error")).to_contain_text("urn:reelqueue:problem:unauthorized")
    await expect(page.get_by_test_id("image-file")).to_be_hidden()
    await context.close()

    _, key = await _tenant()
    context, page, _ = await _signed_in(browser, stack, key)
    await page.get_by_test_id("prompt").fill("no image yet")
    await page.get_by_test_id("create").click()
    await expect(page.get_by_test_id("error")).to_contain_text("urn:reelqueue:problem:unknown-asset")
    await _drop(page, "notes.txt", b"not an image", "application/pdf")  # the API's 415
    await expect(page.get_by_test_id("error")).to_contain_text("urn:reelqueue:problem:upload-type")
    await _drop(page, "page.png", b"<html><script>alert(1)</script></html>", "image/png")
    await expect(page.get_by_test_id("upload-status")).to_contain_text("REJECTED: not an image")
    await context.close()


async def test_studio_lists_generations_a_page_at_a_time(stack, browser, gateway_worker) -> None:
    """Twelve generations (made through the API's create, not started): ten, then the next page;
    then cancelled through the API, which starts each workflow to end it (the ledger closes)."""
    from playwright.async_api import expect
    from test_api_generations import _image

    from adapters.providers import build_providers
    from control import generations

    db = Database(stack.database_url)
    tenant, key = await _tenant()
    image = _image(stack, db, tenant)
    made = [generations.create(db, tenant, f"list-{n}", generations.GenerationBody(
                prompt=f"video {n:02d}", image_asset_id=image, duration_s=1),
                providers=build_providers(stack), credits_per_second=1.0).task_id for n in range(12)]
    try:
        context, page, _ = await _signed_in(browser, stack, key)
        await expect(page.locator("#list li")).to_have_count(10)
        await expect(page.get_by_test_id("list")).to_contain_text("video 11")  # newest first
        await page.get_by_test_id("more").focus()
        await page.keyboard.press("Enter")
        await expect(page.locator("#list li")).to_have_count(12)
        await expect(page.get_by_test_id("list")).to_contain_text("video 00")
        await expect(page.get_by_test_id("more")).to_be_hidden()
        await context.close()
    finally:  # cancelled whatever the page did: an open reservation fails the suite's ledger check
        with httpx.Client(base_url=stack.gateway_url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
            for task_id in made:
                assert http.post(f"/v1/generations/{task_id}/cancel").status_code == 202
        for task_id in made:
            await wait_for_status(stack, task_id, TERMINAL, timeout_s=60)
