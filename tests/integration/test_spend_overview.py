"""`reelqueue spend` and the import overview page on the real stack.

The spend test reviews three videos: one rejected, one regenerated (a new paid attempt) then
approved, one approved; `spend --json`, the gateway's spend gauges and the overview page must all
say what the ledger rows say. The overview test opens the page in headless Chromium during a
40-task run started in two halves and watches the counts move (the first half done beside the
second not started, then all) to the end, where they equal `status` and `spend`
(`REELQUEUE_DOCS_SCREENSHOT=1` also writes that page's screenshot to docs/import-overview.png).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from cli_helpers import run_cli_async
from sqlalchemy import select
from stack_helpers import gateway_log_after, import_small, wait_for_status
from test_review_gallery import BROWSER_ARGS, CHROMIUM, _browser_or_skip

from bench.common import scrape, total
from contracts.messages import ReviewAction, ReviewRequest
from control import review_tokens
from control.review import decide
from control.starting import start_workflows
from schema import queries
from schema.db import Database
from schema.models import CreditEntry, Task

pytestmark = pytest.mark.integration

DOCS_SHOT = Path(__file__).resolve().parents[2] / "docs" / "import-overview.png"
WRITE_DOCS_SHOT = os.environ.get("REELQUEUE_DOCS_SCREENSHOT") == "1"  # read before the stack clears REELQUEUE_*
REASON = "<b>off</b> brand & 'loud'"  # shown on the overview: escaped, never markup


async def _statuses(db: Database, import_id: str, wanted: str, count: int, timeout_s: float = 120) -> list[Task]:
    deadline = time.monotonic() + timeout_s
    while True:
        with db.transaction() as session:
            tasks = queries.list_tasks(session, import_id)
        if sum(t.status == wanted for t in tasks) == count:
            return tasks
        assert time.monotonic() < deadline, Counter(t.status for t in tasks)
        await asyncio.sleep(0.3)


def _ledger(db: Database, task_ids: list[str]) -> dict[str, Counter]:
    """Per task, the sum of each entry type, read straight from credit_ledger."""
    sums: dict[str, Counter] = {t: Counter() for t in task_ids}
    with db.transaction() as session:
        for row in session.scalars(select(CreditEntry).where(CreditEntry.task_id.in_(task_ids))):
            sums[row.task_id][row.entry_type] += row.amount
    return sums


async def test_spend_of_a_reviewed_import_matches_the_ledger(stack, client, task_queue, tmp_path):
    products = [("rej", "Loud Lamp", "Too loud"), ("regen", "Quiet Lamp", "Soft"), ("ok", "Plain Lamp", "Fine")]
    summary = import_small(stack, tmp_path, products, template_extra='review = "required"',
                           extra="[review]\ndeadline_hours = 48\n")
    imp, db = summary.import_id, Database(stack.database_url)
    with db.transaction() as session:
        tasks = queries.list_tasks(session, imp)
    await start_workflows(client, tasks, imp, task_queue)
    tasks = await _statuses(db, imp, "REVIEW", 3)
    by_product = {t.product_id: t for t in tasks}
    rejected, regen, approved = (by_product[p].id for p in ("rej", "regen", "ok"))

    assert (await run_cli_async("review", imp, "--reject", rejected, "--reason", REASON)).code == 0
    [outcome] = await decide(db, client, [regen], ReviewRequest(action=ReviewAction.REGENERATE, by="rita",
                                                               reason="again"))
    assert outcome.ok, outcome.message
    await wait_for_status(stack, regen, {"REVIEW"}, timeout_s=120)
    assert (await run_cli_async("review", imp, "--approve", regen, approved)).code == 0
    for t in tasks:
        await asyncio.wait_for(client.get_workflow_handle(t.workflow_id).result(), timeout=60)

    ledger = _ledger(db, [t.id for t in tasks])
    charged = {t: s["SETTLE"] + s["ADJUSTMENT"] - s["REFUND"] for t, s in ledger.items()}
    assert ledger[regen]["ADJUSTMENT"] > 0 and ledger[regen]["SETTLE"] > 0  # two paid videos
    spent = await run_cli_async("spend", imp, "--json")
    assert spent.code == 0, spent.stdout
    got = spent.json

    def credits(kind: str) -> float:
        return float(sum((s[kind] for s in ledger.values()), Decimal(0)))

    for key, kind in (("reserved", "RESERVE"), ("settled", "SETTLE"), ("released", "RELEASE"),
                      ("refunded", "REFUND"), ("adjustments", "ADJUSTMENT")):
        assert got[key] == credits(kind), key
    assert got["charged"] == float(sum(charged.values())) and got["held"] == 0
    # Rejected: all it was charged; regenerated: the first video (SETTLE), the kept one is the ADJUSTMENT.
    assert got["wasted"] == {"duplicate": 0, "cancelled": 0, "failed": 0, "rejected": float(charged[rejected]),
                             "regenerated": float(ledger[regen]["SETTLE"])}
    assert got["wasted_total"] == float(charged[rejected] + ledger[regen]["SETTLE"])
    assert got["succeeded"] == got["approved"] == 2
    assert got["cost_per_succeeded"] == got["cost_per_approved"] == pytest.approx(got["charged"] / 2, abs=1e-6)
    listed = await run_cli_async("spend", "--json")
    assert next(s for s in listed.json["imports"] if s["import_id"] == imp) == got
    assert (await run_cli_async("spend", "imp_nothing", "--json")).code == 2
    table = await run_cli_async("spend", imp)
    assert table.code == 0 and "wasted: rejected" in table.stdout and "per approved video (2)" in table.stdout
    every = await run_cli_async("spend")
    assert every.code == 0 and imp in every.stdout

    # The same figures as gauges (the import is among the newest), and on the overview page.
    metrics = await asyncio.to_thread(scrape, f"{stack.gateway_url}/metrics")
    assert total(metrics, "reelqueue_import_credits", kind="charged", **{"import": imp}) == got["charged"]
    assert total(metrics, "reelqueue_import_wasted_credits", cause="rejected", **{"import": imp}) == \
        got["wasted"]["rejected"]
    assert total(metrics, "reelqueue_import_cost_per_video", basis="approved", **{"import": imp}) == \
        pytest.approx(got["cost_per_approved"])
    page = _overview_html(stack, imp)
    assert REASON not in page and "&lt;b&gt;off&lt;/b&gt; brand &amp; &#x27;loud&#x27;" in page
    assert 'http-equiv="refresh"' not in page  # nothing left to run
    assert page.count('class="thumb"') == 2 and f'data-task="{regen}"' in page
    assert f'id="spend-charged">{Decimal(str(got["charged"])).normalize():f}<' in page
    _check_overview_tokens(stack, imp)


def _overview_html(settings, import_id: str) -> str:
    link = review_tokens.issue(settings.review_secret, import_id, "olga", scope=review_tokens.OVERVIEW)
    with httpx.Client(base_url=settings.gateway_url, timeout=10, follow_redirects=True) as http:
        page = http.get(f"/review/{import_id}/overview?token={link}")
    assert page.status_code == 200 and page.history[0].status_code == 303, page.text
    assert "script-src 'none'" in page.headers["content-security-policy"]
    return page.text


def _check_overview_tokens(settings, import_id: str) -> None:
    """Missing, expired, forged and other-import tokens are refused; an overview token opens no gallery."""
    secret, base = settings.review_secret, f"{settings.gateway_url}/review/{import_id}"

    def link(key: str, imp: str, **kw) -> str:  # noqa: ANN003
        return f"{base}/overview?token={review_tokens.issue(key, imp, 'olga', scope=review_tokens.OVERVIEW, **kw)}"

    viewer = review_tokens.issue(secret, import_id, "olga", scope=review_tokens.OVERVIEW)
    cases = {
        "missing": (f"{base}/overview", 401),
        "expired": (link(secret, import_id, ttl_s=-5), 401),
        "forged": (link("not-the-secret", import_id), 401),
        "other import": (link(secret, "imp_other"), 403),
        "gallery with an overview token": (f"{base}?token={viewer}", 403),
    }
    for name, (url, status) in cases.items():
        assert httpx.get(url, timeout=10).status_code == status, name
    other = httpx.Client(base_url=settings.gateway_url, timeout=10)
    other.cookies.set("rq_overview", viewer)
    assert other.get("/review/imp_other/overview").status_code == 403  # its cookie names another import
    other.close()


async def _page_figures(page) -> tuple[dict[str, str], dict[str, str], str]:
    """(counts by status, spend figures, state line) as the page shows them now."""
    counts = await page.eval_on_selector_all(
        "#counts [id^=count-]", "cells => cells.map(c => [c.id.slice(6), c.textContent])")
    spend = await page.eval_on_selector_all(
        "#spend td[id^=spend-]", "cells => cells.map(c => [c.id.slice(6), c.textContent])")
    return dict(counts), dict(spend), await page.inner_text("#state")


async def _until_page(page, seen: list[dict[str, str]], done, timeout_s: float):  # noqa: ANN001, ANN202
    """Read the page (it reloads itself: meta refresh) until `done(counts, state)`; every distinct
    set of counts it showed goes to `seen`. (counts, spend, state) then."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            counts, spend, state = await _page_figures(page)
        except Exception:  # noqa: BLE001 - read during the page's own reload: read again
            await asyncio.sleep(0.2)
            continue
        if not seen or seen[-1] != counts:
            seen.append(counts)
        if done(counts, state):
            return counts, spend, state
        assert time.monotonic() < deadline, seen[-1]
        await asyncio.sleep(0.5)


# The run goes at the machine's pace (20 tasks' transcodes took over 150 s at load 20-30), the page at
# its own: each wait is first for the tasks' statuses in Postgres, with a generous deadline, then for
# the page to show them within a few of its reloads (every 5 s; less often while it builds slowly). A
# page that does not follow the run fails at the second wait however loaded the machine is.
RUN_HALF_S, PAGE_FOLLOWS_S = 400, 120


@pytest.mark.timeout(1200)
async def test_overview_page_follows_a_run_to_the_figures_of_status_and_spend(stack, client, task_queue, tmp_path):
    async_playwright = _browser_or_skip()
    products = [(f"OV-{i}", f"Thing {i}", f"Nice {i}") for i in range(10)]
    summary = import_small(stack, tmp_path, products, locales=("en-US", "de-DE"), ratios=("9:16", "16:9"))
    imp, db = summary.import_id, Database(stack.database_url)
    with db.transaction() as session:
        tasks = queries.list_tasks(session, imp)
    assert len(tasks) == 40
    link = await run_cli_async("overview", imp, "--by", "olga", "--json")
    assert link.code == 0, link.stdout
    seen: list[dict[str, str]] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_ARGS)
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        await page.goto(link.json["url"])
        assert "token=" not in page.url
        counts, _, _ = await _page_figures(page)
        assert counts == {"CREATED": "40", "total": "40"}
        seen.append(counts)
        # Half the tasks first: the page must come to show them done beside the 20 not started, a
        # mid-run count that holds until the test starts the rest (no reload has to land in a window).
        await start_workflows(client, tasks[:20], imp, task_queue)
        await _statuses(db, imp, "SUCCEEDED", 20, timeout_s=RUN_HALF_S)
        await _until_page(page, seen, lambda c, _: c == {"SUCCEEDED": "20", "CREATED": "20", "total": "40"},
                          timeout_s=PAGE_FOLLOWS_S)
        await start_workflows(client, tasks[20:], imp, task_queue)
        await _statuses(db, imp, "SUCCEEDED", 40, timeout_s=RUN_HALF_S)
        counts, spend, _ = await _until_page(page, seen, lambda _, state: state == "nothing left to run",
                                             timeout_s=PAGE_FOLLOWS_S)
        assert await page.locator("#progress polygon.band").count() == 6
        if WRITE_DOCS_SHOT:
            await page.screenshot(path=str(DOCS_SHOT), full_page=False)
        # The chart, summed from state events, ends where the tasks' statuses are.
        assert await page.inner_text('.legend b[data-band="succeeded"]') == "40"
        await browser.close()
    assert len(seen) >= 3, seen  # before, during, after: the counts moved on the page
    status = await run_cli_async("status", imp, "--json")
    assert counts == {**{s: str(n) for s, n in status.json["by_status"].items()}, "total": "40"}
    assert counts == {"SUCCEEDED": "40", "total": "40"}
    spent = (await run_cli_async("spend", imp, "--json")).json
    for key in ("reserved", "settled", "released", "adjustments", "charged", "held"):
        assert Decimal(spend[key]) == Decimal(str(spent[key])), key
    assert Decimal(spend["per-succeeded"]) == Decimal(str(spent["cost_per_succeeded"]))
    assert spend["per-approved"] == "-" and spent["cost_per_approved"] is None  # no review in this plan
    # The link's token never reached the gateway's log (its query is redacted).
    log = gateway_log_after(stack, f"/review/{imp}/overview?[redacted]")
    assert f"/review/{imp}/overview?[redacted]" in log and link.json["url"].split("token=")[1] not in log
