"""An import's overview page: `GET /review/{import_id}/overview`.

The same signed-link scheme as the review gallery (gateway/review.py): `reelqueue overview IMPORT_ID`
prints a link whose token (scope `overview`, or a reviewer's) moves into an HttpOnly cookie scoped
to this page's path. The page runs no script (its CSP says so) and refreshes itself with a meta
refresh while a task of the import may still move (every 5 s, less often for a page slow to build).
"""

from __future__ import annotations

import math
import time
from datetime import timedelta

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response

from control import review_tokens as tokens
from control.overview import overview
from gateway.overview_page import render_overview
from gateway.problems import ProblemError
from gateway.review import COOKIE as REVIEW_COOKIE
from gateway.review import PAGE_HEADERS, into_cookie, origins, review_deps, reviewer_of

router = APIRouter()
COOKIE = "rq_overview"
SCOPES = (tokens.OVERVIEW, tokens.REVIEW)  # a reviewer's link opens the overview too
MEDIA_LINK_TTL = timedelta(hours=2)
REFRESH_S = 5


@router.get("/review/{import_id}/overview", response_class=HTMLResponse)
def overview_page(import_id: str, request: Request, token: str | None = Query(default=None)) -> Response:
    """Counts and their progress, spend and waste, failures, thumbnails and workflow links of one import."""
    deps = review_deps(request)
    path = f"/review/{import_id}/overview"
    if token is not None:
        return into_cookie(deps, request, reviewer_of(deps, token, import_id, SCOPES), token, COOKIE, path)
    cookie = request.cookies.get(COOKIE) or request.cookies.get(REVIEW_COOKIE)
    viewer = reviewer_of(deps, cookie, import_id, SCOPES)
    started = time.monotonic()
    with deps.db.transaction() as session:
        view = overview(session, import_id)
    # A big import's page takes seconds to build: it refreshes less often, so that an open page
    # keeps the database busy a tenth of the time at most.
    refresh_s = max(REFRESH_S, math.ceil(10 * (time.monotonic() - started)))
    if view is None:
        raise ProblemError(404, f"no import {import_id}", slug="unknown-import")
    ttl_s = MEDIA_LINK_TTL.total_seconds()
    thumbnails = {t.task_id: deps.signer.link(t.thumbnail_key, ttl_s).url for t in view.thumbnails}
    videos = {t.task_id: deps.signer.link(t.video_key, ttl_s).url for t in view.thumbnails if t.video_key}
    ui = f"{deps.temporal_ui_url.rstrip('/')}/namespaces/{deps.namespace}/workflows/" if deps.temporal_ui_url else ""
    html = render_overview(view, viewer=viewer.sub, thumbnails=thumbnails, videos=videos, workflow_ui=ui,
                           refresh_s=refresh_s if view.running else None)
    policy = (f"default-src 'none'; script-src 'none'; style-src 'unsafe-inline'; "
              f"img-src {origins(thumbnails.values())}; form-action 'none'; base-uri 'none'; frame-ancestors 'none'")
    return HTMLResponse(html, headers={**PAGE_HEADERS, "Content-Security-Policy": policy})
