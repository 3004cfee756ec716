"""The gallery's access rules at the HTTP layer (no stack: every case here is refused, or
redirected, before the gateway reads the database or calls Temporal)."""

from __future__ import annotations

import re
import time
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient

from control import review_tokens as tokens
from gateway.app import create_app
from gateway.review import ReviewDeps

SECRET = "unit-secret"
IMP = "imp_1"


@pytest.fixture
def http() -> TestClient:
    def deps() -> ReviewDeps:  # nothing here may be reached: db, links and Temporal are absent
        return ReviewDeps(db=None, signer=None, secret=SECRET, connect=None)  # type: ignore[arg-type]

    return TestClient(create_app(deps=lambda: None, review_deps=deps), follow_redirects=False)


@pytest.mark.parametrize("token, status, needle", [
    (None, 401, "required"),
    (tokens.issue("forged", IMP, "rita"), 401, "not valid"),
    (tokens.issue(SECRET, IMP, "rita", ttl_s=-1), 401, "expired"),
    (tokens.issue(SECRET, "imp_2", "rita"), 403, "another import"),
    ("a.b.c", 401, "malformed"),
])
def test_gallery_refuses_bad_tokens(http, token, status, needle):
    answer = http.get(f"/review/{IMP}", params={"token": token} if token else None)
    assert answer.status_code == status and needle in answer.json()["detail"]
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert "set-cookie" not in answer.headers


def test_a_link_token_moves_into_a_strict_cookie(http):
    token = tokens.issue(SECRET, IMP, "rita", ttl_s=3600)
    answer = http.get(f"/review/{IMP}", params={"token": token, "locale": "de-DE"})
    assert answer.status_code == 303 and answer.headers["location"] == f"/review/{IMP}?locale=de-DE"
    cookie = answer.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and f"path=/review/{IMP}".lower() in cookie
    assert 3500 < int(cookie.split("max-age=")[1].split(";")[0]) <= 3600


def test_decisions_need_the_cookie_the_csrf_token_and_our_origin(http):
    token = tokens.issue(SECRET, IMP, "rita", now=time.time())
    body = {"task_ids": ["t1"], "action": "approve"}
    assert http.post(f"/review/{IMP}/decisions", json=body).status_code == 401  # no cookie
    http.cookies.set("rq_review", token)
    assert http.post(f"/review/{IMP}/decisions", json=body).status_code == 403  # no CSRF header
    wrong = {"X-CSRF-Token": tokens.csrf_token(SECRET, "another token")}
    assert http.post(f"/review/{IMP}/decisions", json=body, headers=wrong).status_code == 403
    csrf = {"X-CSRF-Token": tokens.csrf_token(SECRET, token)}
    evil = http.post(f"/review/{IMP}/decisions", json=body, headers={**csrf, "Origin": "https://evil.example"})
    assert evil.status_code == 403 and "cross-site" in evil.json()["detail"]
    assert http.post("/review/imp_2/decisions", json=body, headers=csrf).status_code in (401, 403)
    assert http.post(f"/review/{IMP}/decisions", json={"task_ids": [], "action": "approve"},
                     headers=csrf).status_code == 400


class _NoDatabase:
    """The gallery's reads are replaced below; its transaction only has to open and close."""

    @contextmanager
    def transaction(self):  # noqa: ANN201
        yield None


class _PresigningStorage:
    """What the gallery used before: links straight to the S3 host (unreachable from a browser)."""

    def presigned_url(self, key: str, ttl: object) -> str:
        return f"http://minio:9000/reelqueue/{key}?X-Amz-Signature=x"


def test_gallery_videos_play_through_the_gateways_signed_links_only(monkeypatch):
    from control import review as queue
    from delivery.links import LinkSigner
    from gateway import review
    from schema import queries

    signer = LinkSigner(b"k" * 32, "https://reels.example/")
    key = "tenants/default/tasks/t1/proxy/v1/proxy.mp4"
    item = queue.ReviewItem(task_id="t1", status="REVIEW", product_id="p1", title="Mug", price=None, currency=None,
                            locale="de-DE", aspect_ratio="9:16", template_id="tpl", variant="a", prompt="a mug",
                            prompt_edited=False, checks_passed=True, checks=[], cost=1.0, attempts=1, proxy_key=key,
                            last_error=None)
    monkeypatch.setattr(queries, "import_exists", lambda session, import_id: True)
    monkeypatch.setattr(queue, "review_items", lambda *args, **kwargs: [item])
    monkeypatch.setattr(queue, "status_counts", lambda session, import_id: {"REVIEW": 1})
    monkeypatch.setattr(queue, "facets", lambda session, import_id: {"locale": [], "aspect_ratio": [],
                                                                      "template_id": []})
    monkeypatch.setattr(queue, "import_issues", lambda session, import_id: [])
    deps = review.ReviewDeps(db=_NoDatabase(), signer=signer, secret=SECRET, connect=None)  # type: ignore[arg-type]
    deps.storage = _PresigningStorage()  # type: ignore[attr-defined] - what the gallery may no longer use
    http = TestClient(create_app(deps=lambda: None, review_deps=lambda: deps), follow_redirects=False)
    http.cookies.set("rq_review", tokens.issue(SECRET, IMP, "rita", ttl_s=3600))
    page = http.get(f"/review/{IMP}")
    assert page.status_code == 200, page.text
    src = re.search(r'<video src="([^"#]+)', page.text).group(1)
    assert src.startswith("https://reels.example/media/") and src.endswith("/proxy.mp4")
    assert signer.key_for(src.split("/")[-2], "proxy.mp4") == key
    assert "minio" not in page.text and "X-Amz" not in page.text
    assert "media-src https://reels.example;" in page.headers["content-security-policy"]
