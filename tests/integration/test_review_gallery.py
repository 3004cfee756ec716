"""Human review on the real stack, driven through the gallery in headless Chromium.

An import of 8 videos under `review = "required"`; the emulator makes one of them black and one
frozen (its faults). The test opens the link `reelqueue review` prints, plays a video, rejects the
two defective videos with a reason, regenerates one with an edited prompt, approves five with the
keyboard, filters, reads the validation-issues tab, bulk-approves the regenerated video once it is
back in REVIEW, then checks statuses, state events (naming the reviewer), the automatic checks and
the ledger. The reviewer-token
refusals (missing, expired, forged, other import) and the CSRF guard are checked on the same gateway.

Needs Debian's `chromium` (/usr/bin/chromium) and the `playwright` package (test extra); without
them the test skips and says what to install. `REELQUEUE_DOCS_SCREENSHOT=1` also writes the gallery
screenshot to docs/review-gallery.png.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from cli_helpers import run_cli_async
from sqlalchemy import select
from stack_helpers import gateway_log_after, import_small, wait_for_status

from control import review as review_queue
from control import review_tokens
from schema import queries
from schema.db import Database
from schema.models import Attempt, CreditEntry, ReviewCheck, StateEvent, Task

pytestmark = pytest.mark.integration

CHROMIUM = Path("/usr/bin/chromium")
BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run"]
DOCS_SHOT = Path(__file__).resolve().parents[2] / "docs" / "review-gallery.png"
# The third product's description is too long for the template: no task, a copy-review issue.
PRODUCTS = [("lamp", "Aurora Lamp", "Warm light"), ("scarf", "Merino Scarf", "Soft wool"),
            ("essay", "Wordy Mug", "Long " * 120)]
REVIEWER = "rita"
EDITED = "Product shot of {title}, slow zoom, warm evening light"


def _browser_or_skip():
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium package at /usr/bin/chromium (apt-get install -y chromium)")
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        pytest.skip("needs the playwright package (pip install -e '.[test]')")
    return async_playwright


def _refusal(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json().get("detail", "")


async def _all_in_review(settings, import_id: str, count: int, timeout_s: float = 180) -> list[Task]:
    db = Database(settings.database_url)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with db.transaction() as session:
            tasks = queries.list_tasks(session, import_id)
        if sum(t.status == "REVIEW" for t in tasks) == count:
            return tasks
        await asyncio.sleep(0.5)
    pytest.fail(f"not all in REVIEW: {Counter(t.status for t in tasks)}")


def _check_tokens(settings, import_id: str) -> None:
    base = f"{settings.gateway_url}/review/{import_id}"
    secret = settings.review_secret
    cases = {
        "missing": (base, 401),
        "forged": (f"{base}?token={review_tokens.issue('not-the-secret', import_id, REVIEWER)}", 401),
        "expired": (f"{base}?token={review_tokens.issue(secret, import_id, REVIEWER, ttl_s=-5)}", 401),
        "other import": (f"{base}?token={review_tokens.issue(secret, 'imp_other', REVIEWER)}", 403),
        "garbage": (f"{base}?token=abc.def", 401),
    }
    for name, (url, status) in cases.items():
        code, detail = _refusal(httpx.get(url, timeout=10))
        assert code == status, (name, code, detail)
    good = review_tokens.issue(secret, import_id, REVIEWER)
    with httpx.Client(base_url=settings.gateway_url, timeout=10, follow_redirects=True) as http:
        page = http.get(f"/review/{import_id}?token={good}")
        assert page.status_code == 200 and page.history[0].status_code == 303  # token moved into the cookie
        assert "script-src 'nonce-" in page.headers["content-security-policy"]
        assert page.headers["cache-control"] == "no-store"
        body = {"task_ids": ["x"], "action": "approve"}
        assert http.post(f"/review/{import_id}/decisions", json=body).status_code == 403  # no CSRF token
        csrf = {"X-CSRF-Token": review_tokens.csrf_token(secret, good)}
        evil = {**csrf, "Origin": "https://evil.example"}
        assert http.post(f"/review/{import_id}/decisions", json=body, headers=evil).status_code == 403
        assert http.post(f"/review/{import_id}/decisions", json=body, headers=csrf).status_code == 404  # not its task
    cookie_of_other = httpx.Client(base_url=settings.gateway_url, timeout=10)
    cookie_of_other.cookies.set("rq_review", good)
    assert cookie_of_other.get("/review/imp_other").status_code in (401, 403)
    cookie_of_other.close()


async def _press(page, key: str, left_after: int) -> None:
    await page.keyboard.press(key)
    await _counter_is(page, left_after)


async def _counter_is(page, left: int) -> None:
    """Locator assertions, not wait_for_function: the page's CSP forbids the eval that one needs."""
    from playwright.async_api import expect

    await expect(page.locator("#left")).to_have_text(str(left), timeout=30_000)


async def _played(page, seconds: float = 0.2, timeout_s: float = 30) -> None:
    played = ("() => { const v = document.querySelector('.card.current video');"
              " return !!v && !v.paused && v.played.length > 0 && v.played.end(0) - v.played.start(0); }")
    deadline = time.monotonic() + timeout_s
    while (await page.evaluate(played) or 0) <= seconds:
        assert time.monotonic() < deadline, "the current video did not play"
        await asyncio.sleep(0.1)


async def test_review_gallery_end_to_end(stack, client, task_queue, tmp_path, emulator_jobs):
    async_playwright = _browser_or_skip()
    httpx.post(f"{stack.emulator_url}/_sim/faults", json={"black_video": 1, "frozen_video": 1},
               timeout=10).raise_for_status()
    try:
        summary = import_small(stack, tmp_path, PRODUCTS, locales=("en-US", "de-DE"), ratios=("9:16", "16:9"),
                               template_extra='review = "required"', extra="[review]\ndeadline_hours = 48\n")
        with Database(stack.database_url).transaction() as session:
            tasks = queries.list_tasks(session, summary.import_id)
        assert len(tasks) == 8
        from control.starting import start_workflows

        jobs_before = len(emulator_jobs())
        await start_workflows(client, tasks, summary.import_id, task_queue)
        tasks = await _all_in_review(stack, summary.import_id, 8)
    finally:
        httpx.delete(f"{stack.emulator_url}/_sim/faults", timeout=10)
    imp = summary.import_id
    db = Database(stack.database_url)
    with db.transaction() as session:
        checks = {c.task_id: c for c in session.scalars(select(ReviewCheck).where(
            ReviewCheck.task_id.in_([t.id for t in tasks])))}
    failed = {tid: [c["name"] for c in row.results["checks"] if not c["passed"]] for tid, row in checks.items()}
    black = [tid for tid, names in failed.items() if "black" in names]
    frozen = [tid for tid, names in failed.items() if names == ["frozen"]]
    assert len(black) == 1 and len(frozen) == 1, failed  # a black clip is also still: frozen too
    assert sum(1 for names in failed.values() if not names) == 6, failed

    _check_tokens(stack, imp)

    link = await run_cli_async("review", imp, "--by", REVIEWER, "--json")
    assert link.code == 0, link.stdout
    listed = await run_cli_async("review", imp, "--list", "--json")
    assert listed.json["waiting"] == 8 and len(listed.json["tasks"]) == 8

    good = [t.id for t in tasks if t.id not in black + frozen]
    regen = good[0]
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_ARGS)
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        await page.goto(link.json["url"])
        assert "token=" not in page.url  # moved into the cookie
        await page.wait_for_selector(".card video")
        assert await page.inner_text("#left") == "8"
        shot = tmp_path / "review-gallery.png"
        await page.screenshot(path=str(shot), full_page=False)
        if os.environ.get("REELQUEUE_DOCS_SCREENSHOT") == "1":
            shutil.copy(shot, DOCS_SHOT)
        # Play the first video with the keyboard.
        await page.keyboard.press("Space")
        await _played(page)
        left = 8
        for task_id, why in ((black[0], "black video"), (frozen[0], "frozen picture")):
            await page.click(f"#t-{task_id} h2")
            await page.keyboard.press("r")
            await page.fill("#reject-dialog input", why)
            left -= 1
            await _press(page, "Enter", left)
        await page.click(f"#t-{regen} h2")
        await page.keyboard.press("g")
        await page.fill("#regen-dialog textarea", EDITED)
        await page.click("#regen-form button[type=submit]")
        left -= 1
        await _counter_is(page, left)
        await page.click(f"#t-{good[1]} h2")
        for _ in range(5):  # approve moves on to the next video waiting for review
            left -= 1
            await _press(page, "a", left)
        assert left == 0
        # Filters: every status, one locale and one ratio.
        await page.goto(f"{stack.gateway_url}/review/{imp}?status=ALL&locale=de-DE&ratio=9:16")
        assert await page.locator(".card").count() == 2
        assert "(1)" in await page.inner_text("#issues-tab")
        await page.click("#issues-tab")
        row = await page.inner_text("#issues tr:nth-child(2)")
        assert "essay" in row and "description" in row and "copy_review" in row, row

        # The regenerated video is a new paid attempt with the edited prompt, back in REVIEW.
        await wait_for_status(stack, regen, {"REVIEW"}, timeout_s=120)
        with db.transaction() as session:
            assert session.get(Task, regen).prompt_override == EDITED
            attempts = session.scalars(select(Attempt).where(Attempt.task_id == regen)).all()
            assert len(attempts) == 2
        shown = (await run_cli_async("show", regen, "--json")).json
        assert shown["task"]["prompt_override"] == EDITED
        assert [c["attempt_no"] for c in shown["review_checks"]] == [1, 2]  # each rendition checked and kept
        # Bulk approve of a selection: x selects the current video, shift+A approves what is selected.
        await page.goto(f"{stack.gateway_url}/review/{imp}")
        assert await page.locator(".card").count() == 1 and await page.inner_text("#left") == "1"
        assert EDITED in await page.inner_text(f"#t-{regen} .prompt")
        await page.keyboard.press("x")
        await _press(page, "Shift+A", 0)
        await browser.close()
    refused = await run_cli_async("review", imp, "--approve", regen, "--json")
    message = refused.json["results"][0]["message"]
    assert refused.code == 2 and ("not in REVIEW" in message or "not running" in message), message
    for handle in (client.get_workflow_handle(t.workflow_id) for t in tasks):
        await asyncio.wait_for(handle.result(), timeout=60)

    with db.transaction() as session:
        final = {t.id: t.status for t in queries.list_tasks(session, imp)}
        events = session.scalars(select(StateEvent).where(StateEvent.task_id.in_(final), StateEvent.applied)
                                 .order_by(StateEvent.id)).all()
        ledger = session.scalars(select(CreditEntry).where(CreditEntry.task_id.in_(final))).all()
    assert Counter(final.values()) == {"SUCCEEDED": 6, "REJECTED": 2}
    assert {final[black[0]], final[frozen[0]]} == {"REJECTED"}
    by_event: dict[str, list[StateEvent]] = {}
    for e in events:
        by_event.setdefault(e.event, []).append(e)
    assert len(by_event["review_required"]) == 9  # 8, and the regenerated video once more
    assert [e.payload["by"] for e in by_event["review_approved"]] == [REVIEWER] * 6
    assert sorted(e.payload["reason"] for e in by_event["review_rejected"]) == ["black video", "frozen picture"]
    [regenerated] = by_event["review_regenerate"]
    assert regenerated.task_id == regen and regenerated.payload["prompt"] == EDITED

    # The gallery's pages are slices of the whole list, in its order (failed checks first).
    with db.transaction() as session:
        whole = [i.task_id for i in review_queue.review_items(session, imp, review_queue.Filters(status=None))]
        paged = [i.task_id for n in range(3) for i in review_queue.review_items(
            session, imp, review_queue.Filters(status=None), offset=3 * n, limit=3)]
    assert paged == whole and len(whole) == 8 and set(whole[:2]) == {black[0], frozen[0]}
    # Nothing the reviewer's link carried was logged by the gateway.
    log = gateway_log_after(stack, f"/review/{imp}?[redacted]")
    assert f"GET /review/{imp}?[redacted]" in log and link.json["url"].split("token=")[1] not in log
    assert regenerated.payload["by"] == REVIEWER and regenerated.to_status == "QUEUED"
    sums: dict[str, Counter] = {}
    for row in ledger:
        sums.setdefault(row.task_id, Counter())[row.entry_type] += row.amount
    for task_id, s in sums.items():
        assert s["RESERVE"] == s["SETTLE"] + s["RELEASE"], (task_id, s)
        assert (s["ADJUSTMENT"] > 0) == (task_id == regen), (task_id, s)  # the regenerated attempt's cost
    assert len(emulator_jobs()) - jobs_before == 9
    check = await run_cli_async("ledger", "check", imp, "--json")
    assert check.code == 0, check.stdout


async def test_the_filters_change_the_cards_under_the_pages_csp_and_a_long_title_wraps(stack, tmp_path):
    """Issue 44.12-13: the filter menus' inline `onchange` was refused by the page's own nonce CSP (a
    `script-src-attr` violation per menu on each load) and the form had no button, so a filter did
    nothing; a 200-character unbroken title made its card, and the page, wider than the window."""
    async_playwright = _browser_or_skip()
    from playwright.async_api import TimeoutError as PlaywrightTimeout

    products = [("lamp", "W" * 200, "Warm light"), ("scarf", "Merino Scarf", "Soft wool")]
    summary = import_small(stack, tmp_path, products, locales=("en-US", "de-DE"),
                           template_extra="max_title_chars = 300")
    assert summary.tasks == 4
    link = await run_cli_async("review", summary.import_id, "--by", REVIEWER, "--json")
    assert link.code == 0, link.stdout
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_ARGS)
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        refused: list[str] = []
        page.on("console", lambda message: refused.append(message.text)
                if "Content Security Policy" in message.text else None)
        await page.goto(link.json["url"])  # the token moves into the cookie; waiting for review: none
        await page.goto(f"{stack.gateway_url}/review/{summary.import_id}?status=ALL")
        assert await page.locator(".card").count() == 4
        widths = await page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
        shown = []
        for name, value in (("locale", "de-DE"), ("status", "REVIEW")):
            try:
                async with page.expect_navigation(timeout=15_000):
                    await page.select_option(f"select[name={name}]", value)
            except PlaywrightTimeout:
                pass  # the filter did nothing: the counts below say so
            shown.append(await page.locator(".card").count())
        await browser.close()
    assert (shown, refused) == ([2, 0], []), (shown, refused)  # de-DE: 2 cards; then none waits for review
    assert widths[0] <= widths[1], widths
