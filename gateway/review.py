"""The review gallery: `GET /review/{import_id}` and the reviewer's decisions.

Access: a signed, expiring reviewer token (control/review_tokens.py) for this import. The link
`reelqueue review` prints carries it in the query; the gateway moves it into an HttpOnly,
SameSite=Strict cookie scoped to the import's path and redirects to the bare URL (so the token does
not stay in the address bar or leak in a Referer). Decisions are JSON POSTs that need the cookie,
the page's CSRF token in `X-CSRF-Token` (an HMAC of the reviewer token) and, when the browser sends
one, an Origin equal to the gateway's own (or REELQUEUE_PUBLIC_URL's, behind a TLS-terminating proxy):
a cross-site form or script can do none of that. The cookie and CSRF token are checked before the
body is read. Behind an https public URL the cookie is Secure. The grid shows one page at a time.
Decisions go to each task's workflow as the `review` update, naming the token's reviewer.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal
from urllib.parse import urlencode, urlsplit

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from pydantic import BaseModel, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from temporalio.client import Client

from contracts.messages import ReviewAction, ReviewRequest
from control import review as queue
from control import review_tokens as tokens
from delivery.links import LinkSigner
from gateway.guards import read_body
from gateway.problems import ProblemError
from gateway.review_page import render_gallery
from schema import queries
from schema.db import Database

router = APIRouter()
COOKIE = "rq_review"
CSRF_HEADER = "x-csrf-token"
VIDEO_LINK_TTL = timedelta(hours=2)
MAX_DECISION_BYTES = 128 * 1024  # 500 task ids, a reason and a prompt fit with room to spare


@dataclass
class ReviewDeps:
    db: Database
    signer: LinkSigner  # the gallery's videos play through the gateway's signed media links
    secret: str
    connect: Callable[[], Awaitable[Client]]
    previous_secret: str = ""  # still accepted while the review secret changes
    public_url: str = ""  # REELQUEUE_PUBLIC_URL: its origin is ours too; https makes the cookie Secure
    page_size: int = 60
    temporal_ui_url: str = ""  # the overview links each task to its workflow's page there
    namespace: str = "default"
    _client: Client | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def client(self) -> Client:
        async with self._lock:
            if self._client is None:
                self._client = await self.connect()
            return self._client


def review_deps_from_settings() -> ReviewDeps:
    from adapters.temporal_client import connect, namespace_of
    from config.settings import Settings

    settings = Settings()
    return ReviewDeps(db=Database(settings.database_url), signer=LinkSigner.from_settings(settings),
                      secret=settings.review_secret, previous_secret=settings.review_secret_previous,
                      public_url=settings.public_url, page_size=settings.review_page_size,
                      temporal_ui_url=settings.temporal_ui_url, namespace=namespace_of(settings),
                      connect=lambda: connect(settings))


def review_deps(request: Request) -> ReviewDeps:
    state = request.app.state
    if getattr(state, "review_deps", None) is None:
        state.review_deps = state.review_factory()
    return state.review_deps


def reviewer_of(deps: ReviewDeps, token: str | None, import_id: str,
                scopes: tuple[str, ...] = (tokens.REVIEW,)) -> tokens.Reviewer:
    try:
        return tokens.verify(deps.secret, token, import_id, previous=deps.previous_secret, scopes=scopes)
    except tokens.TokenRefused as exc:
        raise ProblemError(403 if exc.other_import else 401, str(exc), slug="review-token") from None


class DecisionBody(BaseModel):
    task_ids: list[str] = Field(min_length=1, max_length=500)
    action: ReviewAction
    reason: str = Field(default="", max_length=2000)
    prompt: str | None = Field(default=None, max_length=2000)


@router.get("/review/{import_id}", response_class=HTMLResponse)
def gallery(
    import_id: str, request: Request, token: str | None = Query(default=None),
    status: str = Query(default="REVIEW"), locale: str = "", ratio: str = "", template: str = "",
    tab: Literal["videos", "issues"] = "videos", page: int = Query(default=1, ge=1, le=100_000),
) -> Response:
    """The grid of videos (default: those waiting in REVIEW) and the import's validation issues."""
    deps = review_deps(request)
    if token is not None:  # from the link: into the cookie, then the same page without it
        return into_cookie(deps, request, reviewer_of(deps, token, import_id), token, COOKIE,
                           f"/review/{import_id}")
    cookie = request.cookies.get(COOKIE)
    reviewer = reviewer_of(deps, cookie, import_id)
    filters = queue.Filters(status=None if status == "ALL" else status or None, locale=locale or None,
                            aspect_ratio=ratio or None, template_id=template or None)
    with deps.db.transaction() as session:
        if not queries.import_exists(session, import_id):
            raise ProblemError(404, f"no import {import_id}", slug="unknown-import")
        items = queue.review_items(session, import_id, filters, offset=(page - 1) * deps.page_size,
                                   limit=deps.page_size + 1)
        counts = queue.status_counts(session, import_id)
        facets = queue.facets(session, import_id)
        issues = queue.import_issues(session, import_id)
    more, items = len(items) > deps.page_size, items[:deps.page_size]
    ttl_s = VIDEO_LINK_TTL.total_seconds()
    videos = {i.task_id: deps.signer.link(i.proxy_key, ttl_s).url for i in items if i.proxy_key}
    nonce = secrets.token_urlsafe(16)
    html = render_gallery(import_id=import_id, reviewer=reviewer.sub, items=items, videos=videos, counts=counts,
                          facets=facets, issues=issues, filters=filters, tab=tab,
                          csrf=tokens.csrf_token(deps.secret, cookie), nonce=nonce, page=page, more=more)
    return HTMLResponse(html, headers={**PAGE_HEADERS, "Content-Security-Policy": _policy(nonce, videos.values())})


def into_cookie(deps: ReviewDeps, request: Request, reviewer: tokens.Reviewer, token: str, cookie: str,
                path: str) -> Response:
    """The link's token into an HttpOnly cookie scoped to `path`, and a redirect to the same page
    without it (the token leaves the address bar and never reaches a Referer)."""
    kept = {k: v for k, v in request.query_params.items() if k != "token"}
    response = RedirectResponse(path + (f"?{urlencode(kept)}" if kept else ""), status_code=303)
    response.set_cookie(cookie, token, max_age=max(1, int(reviewer.exp - time.time())), httponly=True,
                        samesite="strict", path=path, secure=_https(deps.public_url))
    return response


PAGE_HEADERS = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY"}


def _policy(nonce: str, video_urls) -> str:  # noqa: ANN001 - Iterable[str]
    """Only our inline script (by nonce) runs; videos come only from the gateway's media links' origin."""
    media = origins(video_urls)
    return (f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'unsafe-inline'; media-src {media}; "
            "connect-src 'self'; img-src 'self' data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")


def origins(urls) -> str:  # noqa: ANN001 - Iterable[str]
    """The CSP source list of `urls`' origins ('none' for no URL)."""
    return " ".join(sorted({f"{u.scheme}://{u.netloc}" for u in map(urlsplit, urls)})) or "'none'"


def _https(public_url: str) -> bool:
    return public_url.lower().startswith("https://")


def _origins(request: Request, public_url: str) -> set[str]:
    """The gateway's own origin as this request reached it, and the public one behind a proxy."""
    parts = urlsplit(public_url)
    public = {f"{parts.scheme}://{parts.netloc}".lower()} if parts.scheme and parts.netloc else set()
    return {f"{request.url.scheme}://{request.url.netloc}".lower()} | public


@router.post("/review/{import_id}/decisions")
async def decisions(import_id: str, request: Request) -> JSONResponse:
    """One decision for one or more tasks of the import (bulk approve sends many). The cookie, the
    origin and the CSRF token are checked before the body is read."""
    deps = review_deps(request)
    cookie = request.cookies.get(COOKIE)
    reviewer = reviewer_of(deps, cookie, import_id)
    origin = request.headers.get("origin")
    if origin is not None and origin.lower() not in _origins(request, deps.public_url):
        raise ProblemError(403, "cross-site request refused", slug="review-csrf")
    if not tokens.csrf_ok(deps.secret, cookie, request.headers.get(CSRF_HEADER)):
        raise ProblemError(403, "missing or wrong CSRF token; reload the page", slug="review-csrf")
    try:
        body = DecisionBody.model_validate_json(await read_body(request, MAX_DECISION_BYTES))
    except ValidationError:
        raise ProblemError(400, "the request is not valid", slug="review-decision") from None
    ids = list(dict.fromkeys(body.task_ids))
    known = await run_in_threadpool(_known, deps, import_id, ids)
    if len(known) != len(ids):
        raise ProblemError(404, f"{len(ids) - len(known)} of the tasks are not in import {import_id}",
                           slug="unknown-task")
    request_ = ReviewRequest(action=body.action, by=reviewer.sub, reason=body.reason.strip(),
                             prompt=(body.prompt or "").strip() or None)
    try:
        client = await deps.client()
    except (RuntimeError, OSError):  # the class only: connection errors name hosts
        raise ProblemError(503, "the workflow service is unavailable; try again", slug="review-unavailable",
                           headers={"Retry-After": "5"}) from None
    outcomes = await queue.decide(deps.db, client, ids, request_)
    return JSONResponse({"reviewer": reviewer.sub, "results": [o.model_dump() for o in outcomes]})


def _known(deps: ReviewDeps, import_id: str, ids: list[str]) -> set[str]:
    with deps.db.transaction() as session:
        return queue.tasks_of_import(session, import_id, ids)
