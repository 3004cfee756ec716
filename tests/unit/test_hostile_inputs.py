"""Hostile catalogs and plans through the real CLI (dry run, no stack): exit 2 with a message for a file
that cannot be read, an invalid row with its reason for each image that is not one."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HEADER = "product_id,title,description,image_url,price,currency,category\n"


@pytest.mark.parametrize("nested", ["[" * 5000 + "]" * 5000, "{b = " * 5000 + "1" + "}" * 5000])
def test_a_deeply_nested_plan_exits_2_with_a_message(cli, tmp_path, nested: str) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text((EXAMPLES / "plan.toml").read_text() + f"\nx = {nested}\n")
    result = cli("import", str(EXAMPLES / "catalog.csv"), "--plan", str(plan), "--dry-run")
    assert result.exit_code == 2, result.output
    assert "nests arrays or tables too deeply" in result.output and not isinstance(result.exception, RecursionError)


def test_a_128_kib_header_line_exits_2_with_a_message(cli, tmp_path) -> None:
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(HEADER.rstrip("\n") + "," + "x" * (128 * 1024) + "\nP-1,t,d,a.png,1.00,USD,Home\n")
    result = cli("import", str(catalog), "--plan", str(EXAMPLES / "plan.toml"), "--dry-run", "--json")
    assert result.exit_code == 2, result.output
    assert "line 1 is longer than 65536 characters" in json.loads(result.stdout)["error"]


def test_images_that_are_not_images_make_their_rows_invalid(cli, hostile_image_catalog) -> None:
    result = cli("import", str(hostile_image_catalog), "--plan", str(EXAMPLES / "plan.toml"), "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    issues = {i["product_id"]: i for i in json.loads(Path(summary["report"]).read_text())["issues"]}
    assert "OK-1" not in issues and summary["invalid_rows"] == 3
    expected = {"HTML-1": "not an image", "BOMB-1": "image too large",
                "DOT-1": "must stay inside the catalog's folder"}
    for pid, reason in expected.items():
        issue = issues[pid]
        assert (issue["field"], issue["action"]) == ("image_url", "row_invalid") and reason in issue["reason"], issue
        assert issue["row"] is not None and issue["value"]
    assert "s3cr3t" not in Path(summary["report"]).read_text()


# Tenant text on the operator's pages (issue 44.11-13): escaped and sent with a CSP already; a bidi
# control must not reorder what the page shows, and the filters must work under that CSP.
FLIP = "ok \u202eevorppa\u202c"  # reads "ok approve" where the override is obeyed
BIDI = ("\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069")


def _gallery(title: str = FLIP, **item: str) -> str:
    from control.review import Filters, IssueItem, ReviewItem
    from gateway.review_page import render_gallery

    review = ReviewItem(task_id="t1", status="REVIEW", product_id=FLIP, title=title, price="1", currency="USD",
                        locale="en-US", aspect_ratio="9:16", template_id=FLIP, variant=FLIP, prompt=FLIP,
                        prompt_edited=False, checks_passed=None, checks=[], cost=0, attempts=1, proxy_key=None,
                        last_error=None, **item)
    issue = IssueItem(row=2, product_id=FLIP, field=FLIP, value=FLIP, reason="r", action="row_invalid")
    common = dict(import_id="imp_1", reviewer=FLIP, items=[review], videos={}, counts={"REVIEW": 1},
                  facets={"locale": ["en-US"], "aspect_ratio": ["9:16"], "template_id": [FLIP]}, filters=Filters(),
                  csrf="c", nonce="n")
    return render_gallery(**common, tab="videos", issues=[issue]) + render_gallery(**common, tab="issues",
                                                                                    issues=[issue])


def test_bidi_controls_cannot_reorder_the_review_gallery() -> None:
    html = re.sub(r' value="[^"]*"', "", _gallery())  # a filter's value is sent back as it is, never shown
    assert not any(c in html for c in BIDI), [hex(ord(c)) for c in BIDI if c in html]
    assert "<bdi>ok \\u202eevorppa\\u202c</bdi>" in html  # shown as written, in its own direction


def test_the_gallery_filters_need_no_inline_handler() -> None:
    """Issue 44.12: `onchange=` is an inline handler, which the page's nonce CSP refuses; the form
    submits with its button, or by the nonce'd script on change."""
    html = _gallery()
    assert re.search(r"<[^>]*\son[a-z]+=", html) is None, re.search(r"<[^>]*\son[a-z]+=", html)
    form = html[html.index('<form class="filters"'):html.index("</form>")]
    assert '<button type="submit"' in form


def test_the_overview_page_isolates_bidi_text() -> None:
    from datetime import UTC, datetime

    from control.overview import BANDS, BUCKETS, Overview, TaskRow, Thumbnail
    from gateway.overview_page import render_overview
    from schema.spend import FIGURES, spend_from_row

    start = datetime(2026, 12, 1, tzinfo=UTC)
    view = Overview(import_id="imp_1", catalog="x\u202evsc.exe", created_at=start, total=1, counts={"QUEUED": 1},
                    running=True, times=[start] * BUCKETS, bands={b: [0] * BUCKETS for b in BANDS},
                    spend=spend_from_row({"import_id": "imp_1", **dict.fromkeys(FIGURES, 0)}), failures=[],
                    thumbnails=[Thumbnail(task_id="t1", label=FLIP, thumbnail_key="k/t.jpg", video_key=None)],
                    tasks=[TaskRow(task_id="t1", workflow_id="wf-1", status="QUEUED", product_id=FLIP,
                                   locale="en-US", aspect_ratio="9:16", updated_at=start)])
    html = render_overview(view, viewer="olga", thumbnails={"t1": "https://gw/t"}, videos={}, workflow_ui="",
                           refresh_s=None)
    assert not any(c in html for c in BIDI), [hex(ord(c)) for c in BIDI if c in html]
    assert "<bdi>x\\u202evsc.exe</bdi>" in html
