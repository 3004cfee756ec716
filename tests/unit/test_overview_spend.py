"""The overview page's rendering, its token scopes and the spend gauges (pure logic; the queries run
in tests/integration/test_spend_overview.py)."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from control import review_tokens as tokens
from control.overview import BANDS, BUCKETS, Failure, Overview, TaskRow, Thumbnail
from gateway.overview_page import render_overview
from metrics.collector import snapshot_metrics
from schema.spend import FIGURES, WASTE_CAUSES, spend_from_row

SECRET = "s" * 32
EVIL = "<script>alert('x')</script>&\""
START = datetime(2026, 12, 1, 20, 0, tzinfo=UTC)


def _spend(**figures: float) -> dict:
    return {"import_id": "imp_1", **dict.fromkeys(FIGURES, 0), **figures}


def test_spend_figures_follow_the_ledger_sums():
    s = spend_from_row(_spend(reserved=30, settled=20, released=6, adjusted=5, refunded=1, duplicate=2,
                              rejected=4, regenerated=3, succeeded=2, approved=1))
    assert (s.charged, s.held) == (Decimal(24), Decimal(4))  # 20 + 5 - 1; 30 - 20 - 6 still held
    assert s.wasted == {"duplicate": 2, "cancelled": 0, "failed": 0, "rejected": 4, "regenerated": 3}
    assert s.wasted_total == 9 and (s.cost_per_succeeded, s.cost_per_approved) == (12, 24)
    assert spend_from_row(_spend(settled=5)).cost_per_succeeded is None  # no video: no cost per video
    assert set(s.as_json()["wasted"]) == set(WASTE_CAUSES) and s.as_json()["charged"] == 24.0


def test_spend_rows_of_the_snapshot_become_per_import_gauges():
    rows = [("spend", "imp_1", name, value, None)
            for name, value in _spend(reserved=9, settled=6, released=3, rejected=6, succeeded=0).items()
            if name != "import_id"]
    got = {(s.name, tuple(s.labels.values())): s.value for f in snapshot_metrics(rows, {}, []) for s in f.samples}
    assert got[("reelqueue_import_credits", ("imp_1", "charged"))] == 6
    assert got[("reelqueue_import_credits", ("imp_1", "held"))] == 0
    assert got[("reelqueue_import_wasted_credits", ("imp_1", "rejected"))] == 6
    assert got[("reelqueue_import_videos", ("imp_1", "succeeded"))] == 0
    assert ("reelqueue_import_cost_per_video", ("imp_1", "succeeded")) not in got  # no video yet


def test_token_scopes():
    viewer = tokens.issue(SECRET, "imp_1", "olga", scope=tokens.OVERVIEW)
    assert tokens.verify(SECRET, viewer, "imp_1", scopes=(tokens.OVERVIEW, tokens.REVIEW)).scope == "overview"
    with pytest.raises(tokens.TokenRefused, match="overview page only") as refused:
        tokens.verify(SECRET, viewer, "imp_1")  # the gallery takes reviewer tokens only
    assert refused.value.other_import  # a valid token where it does not belong: 403
    # A token issued before scopes existed (no scope claim) is a reviewer's.
    body = json.dumps({"exp": 2**40, "imp": "imp_1", "sub": "rita"}, separators=(",", ":"), sort_keys=True).encode()
    mac = tokens._mac(SECRET, body)
    old = f"{tokens._b64(body)}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"
    assert tokens.verify(SECRET, old, "imp_1").scope == tokens.REVIEW


def _view(running: bool) -> Overview:
    times = [START + timedelta(seconds=i + 1) for i in range(BUCKETS)]
    bands = {band: [0] * BUCKETS for band in BANDS}
    bands["waiting"] = [2] * (BUCKETS // 2) + [0] * (BUCKETS - BUCKETS // 2)
    bands["succeeded"] = [0] * (BUCKETS // 2) + [1] * (BUCKETS - BUCKETS // 2)
    bands["failed"] = [0] * (BUCKETS // 2) + [1] * (BUCKETS - BUCKETS // 2)
    return Overview(
        import_id="imp_1", catalog=EVIL, created_at=START, total=2, counts={"SUCCEEDED": 1, "FAILED_FINAL": 1},
        running=running, times=times, bands=bands, spend=spend_from_row(_spend(settled=3, succeeded=1)),
        failures=[Failure(status="FAILED_FINAL", error_class="provider", error=EVIL, count=1,
                          tasks=[("t2", "wf/" + EVIL)])],
        thumbnails=[Thumbnail(task_id="t1", label=EVIL, thumbnail_key="k/thumb.jpg", video_key="k/proxy.mp4")],
        tasks=[TaskRow(task_id="t1", workflow_id="wf-1", status="SUCCEEDED", product_id=EVIL, locale="en-US",
                       aspect_ratio="9:16", updated_at=START)])


def test_the_overview_page_escapes_every_input_and_refreshes_only_while_running():
    html = render_overview(_view(True), viewer=EVIL, thumbnails={"t1": "https://gw/m/a?x=1&y=2"},
                           videos={"t1": "https://gw/m/b"}, workflow_ui="http://ui/namespaces/default/workflows/",
                           refresh_s=5)
    assert "<script" not in html and EVIL not in html
    assert html.count("&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;&amp;&quot;") >= 5
    assert '<meta http-equiv="refresh" content="5">' in html
    assert 'href="http://ui/namespaces/default/workflows/wf%2F%3Cscript%3E' in html  # quoted, then escaped
    assert 'src="https://gw/m/a?x=1&amp;y=2"' in html
    assert html.count('class="band"') == len(BANDS) and 'id="count-SUCCEEDED">1<' in html
    assert 'id="spend-charged">3<' in html and 'id="spend-per-succeeded">3<' in html
    done = render_overview(_view(False), viewer="olga", thumbnails={"t1": "https://gw/m/a"}, videos={},
                           workflow_ui="", refresh_s=None)
    assert "http-equiv" not in done and "nothing left to run" in done
    paused = _view(True).model_copy(update={"paused_by": EVIL})
    html = render_overview(paused, viewer="olga", thumbnails={"t1": "https://gw/m/a"}, videos={}, workflow_ui="",
                           refresh_s=5)
    assert "paused by &lt;script&gt;" in html and EVIL not in html

