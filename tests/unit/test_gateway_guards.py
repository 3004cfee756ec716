"""The gateway's guards at the HTTP layer (no stack): tokens out of the access log, bodies capped and
read only after the cookie, /metrics guarded, docs pages off, odd tokens refused, Secure cookies
and the Origin check behind an https public URL, the gallery's pager."""

from __future__ import annotations

import logging
import time

import pytest
from fastapi.testclient import TestClient

from config.settings import Settings
from control import review_tokens as tokens
from control.review import Filters
from delivery.links import LinkSigner
from gateway.app import create_app
from gateway.deps import GatewayDeps
from gateway.guards import RedactTokens, redact
from gateway.media import MediaDeps
from gateway.review import ReviewDeps
from gateway.review_page import render_gallery
from schema.db import Database

SECRET = "unit-secret-0123456789-abcdefghijklmnop"
IMP = "imp_1"
PUBLIC = "https://review.example.com"
NOWHERE_DB = "postgresql+psycopg://nobody@127.0.0.1:1/nothing?connect_timeout=2"


def _settings(**values: object) -> Settings:
    return Settings(home="/nonexistent-reelqueue-home", **values)


def _client(public_url: str = "", previous: str = "", **settings: object) -> TestClient:
    def deps() -> ReviewDeps:  # nothing here may be reached: db, links and Temporal are absent
        return ReviewDeps(db=None, signer=None, secret=SECRET, connect=None,  # type: ignore[arg-type]
                          public_url=public_url, previous_secret=previous)

    def gateway() -> GatewayDeps:  # /metrics reports this database as down
        return GatewayDeps(db=Database(NOWHERE_DB), providers={}, signaler=None)  # type: ignore[arg-type]

    app = create_app(deps=gateway, review_deps=deps, settings=_settings(**settings))
    return TestClient(app, follow_redirects=False)


def test_tokens_never_reach_the_access_log():
    media = "/media/eyJmIjoidCJ9.c2lnbmF0dXJl/index.m3u8"
    review = f"/review/{IMP}?token=eyJpbXAiOiJ4In0.bWFj&locale=de"
    assert redact(media) == "/media/[redacted]/index.m3u8"
    assert redact(review) == f"/review/{IMP}?[redacted]"
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1:5", "GET", media, "1.1", 200), None)
    assert RedactTokens().filter(record)
    assert "c2lnbmF0dXJl" not in record.getMessage() and "/media/[redacted]/index.m3u8" in record.getMessage()
    create_app(deps=lambda: None, settings=_settings())
    assert any(isinstance(f, RedactTokens) for f in logging.getLogger("uvicorn.access").filters)


def test_a_decision_body_is_read_only_after_the_cookie():
    http = _client()
    huge = {"task_ids": ["t" * 60] * 3000, "action": "approve"}  # ~200 KiB: over the decision cap
    assert http.post(f"/review/{IMP}/decisions", json=huge).status_code == 401  # no cookie: not read
    token = tokens.issue(SECRET, IMP, "rita", now=time.time())
    http.cookies.set("rq_review", token)
    csrf = {"X-CSRF-Token": tokens.csrf_token(SECRET, token)}
    assert http.post(f"/review/{IMP}/decisions", json=huge, headers=csrf).status_code == 413


def test_bodies_past_the_gateway_cap_are_refused_before_any_route():
    http = _client()
    answer = http.post("/webhooks/emulator", content=b"x" * (2 * 1024 * 1024))
    assert answer.status_code == 413 and answer.headers["content-type"].startswith("application/problem+json")


def test_metrics_need_the_bearer_token_or_a_loopback_client():
    assert _client().get("/metrics").status_code == 403  # TestClient's peer is "testclient", not loopback
    token = "metrics-token-0123456789-abcdefghijkl"
    http = _client(metrics_token=token)
    assert http.get("/metrics").status_code == 401
    assert http.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert http.get("/metrics", headers={"Authorization": "Bearer é".encode("latin-1")}).status_code == 401
    scraped = http.get("/metrics", headers={"Authorization": f"Bearer {token}"})
    assert scraped.status_code == 200 and "reelqueue_database_up 0.0" in scraped.text


def test_interactive_docs_are_off_unless_asked_for_and_the_openapi_document_stays():
    http = _client()
    assert http.get("/docs").status_code == 404 and http.get("/redoc").status_code == 404
    assert "/metrics" not in http.get("/openapi.json").json()["paths"]
    assert _client(api_docs=True).get("/docs").status_code == 200


@pytest.mark.parametrize("token", ["é.ü", "ü", "abc.d€f"])
def test_non_ascii_tokens_are_refused_not_crashed(token):
    http = _client()
    answer = http.get(f"/review/{IMP}", params={"token": token})
    assert answer.status_code == 401
    http.app.state.media = MediaDeps(storage=None, signer=LinkSigner(SECRET.encode(), "http://gw"))  # type: ignore[arg-type]
    assert http.get(f"/media/{token}/index.m3u8").status_code == 404


def test_a_non_ascii_csrf_header_is_refused_not_crashed():
    http = _client()
    token = tokens.issue(SECRET, IMP, "rita", now=time.time())
    http.cookies.set("rq_review", token)
    answer = http.post(f"/review/{IMP}/decisions", json={"task_ids": ["t"], "action": "approve"},
                       headers={"X-CSRF-Token": "é".encode("latin-1")})
    assert answer.status_code == 403


def test_behind_an_https_public_url_the_cookie_is_secure_and_its_origin_is_ours():
    token = tokens.issue(SECRET, IMP, "rita", ttl_s=3600)
    plain = _client().get(f"/review/{IMP}", params={"token": token})
    assert "secure" not in plain.headers["set-cookie"].lower()
    http = _client(public_url=PUBLIC)
    answer = http.get(f"/review/{IMP}", params={"token": token})
    assert "; secure" in answer.headers["set-cookie"].lower()
    http.cookies.set("rq_review", token)
    csrf = {"X-CSRF-Token": tokens.csrf_token(SECRET, token)}
    body = {"task_ids": [], "action": "approve"}  # past the origin and CSRF checks: 400 for the empty list
    assert http.post(f"/review/{IMP}/decisions", json=body, headers={**csrf, "Origin": PUBLIC}).status_code == 400
    evil = http.post(f"/review/{IMP}/decisions", json=body, headers={**csrf, "Origin": "https://evil.example"})
    assert evil.status_code == 403


def test_reviewer_tokens_of_the_previous_key_work_during_a_change_over():
    old = tokens.issue("old-review-secret-0123456789abcdefgh", IMP, "rita", ttl_s=3600)
    assert _client().get(f"/review/{IMP}", params={"token": old}).status_code == 401
    rotated = _client(previous="old-review-secret-0123456789abcdefgh")
    assert rotated.get(f"/review/{IMP}", params={"token": old}).status_code == 303


def test_the_gallery_pages_with_previous_and_next_links():
    common = dict(import_id=IMP, reviewer="rita", items=[], videos={}, counts={}, issues=[],
                  facets={"locale": [], "aspect_ratio": [], "template_id": []}, filters=Filters(locale="de-DE"),
                  tab="videos", csrf="c", nonce="n")
    first = render_gallery(**common, page=1, more=True)
    assert 'id="next-page"' in first and 'id="prev-page"' not in first
    assert f"/review/{IMP}?status=REVIEW&amp;locale=de-DE&amp;page=2" in first
    last = render_gallery(**common, page=3, more=False)
    assert 'id="prev-page"' in last and "page=2" in last and 'id="next-page"' not in last
