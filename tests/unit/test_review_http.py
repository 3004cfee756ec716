"""The gallery's access rules at the HTTP layer (no stack: every case here is refused, or
redirected, before the gateway reads the database or calls Temporal)."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from control import review_tokens as tokens
from gateway.app import create_app
from gateway.review import ReviewDeps

SECRET = "unit-secret"
IMP = "imp_1"


@pytest.fixture
def http() -> TestClient:
    def deps() -> ReviewDeps:  # nothing here may be reached: db, storage and Temporal are absent
        return ReviewDeps(db=None, storage=None, secret=SECRET, connect=None)  # type: ignore[arg-type]

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
