"""The tenant studio at `/app`: one static page and its script and style, served from this package
(no build step, nothing fetched from elsewhere at run time). The page talks to /v1 like any client;
the Content-Security-Policy lets it reach only this origin, the bucket's presigned uploads and the
media links' origin."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from adapters.storage_cors import origin_of
from config.settings import Settings
from gateway.problems import ProblemError

router = APIRouter(include_in_schema=False)
STATIC = Path(__file__).parent / "static" / "studio"
TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           "X-Frame-Options": "DENY"}


@cache
def _files() -> dict[str, bytes]:
    """The page's files, read once: only these names are served."""
    return {p.name: p.read_bytes() for p in STATIC.iterdir() if p.suffix in (*TYPES, ".html")}


def _policy(request: Request) -> str:
    """Built once per app from Settings (a test may set `app.state.studio_policy` first)."""
    found = getattr(request.app.state, "studio_policy", None)
    if found is None:
        found = request.app.state.studio_policy = policy(Settings())
    return found


def policy(settings: Settings) -> str:
    """Scripts and styles from here only; uploads to the origin presigned URLs name; videos from
    the media links' origin."""
    from adapters.storage import ObjectStorage

    uploads = ObjectStorage.from_settings(settings).upload_origin
    media = origin_of(settings.media_base_url()) or ""
    return ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; "
            f"media-src 'self' {media} blob:; connect-src 'self' {uploads}; form-action 'self'; "
            "base-uri 'none'; frame-ancestors 'none'")


@router.get("/app", response_class=HTMLResponse)
def studio(request: Request) -> HTMLResponse:
    return HTMLResponse(_files()["index.html"],
                        headers={**HEADERS, "Content-Security-Policy": _policy(request)})


@router.get("/app/static/{name}")
def static(name: str) -> Response:
    body = _files().get(name)
    kind = TYPES.get(Path(name).suffix)
    if body is None or kind is None:
        raise ProblemError(404, "no such file", slug="not-found")
    return Response(body, media_type=kind, headers=HEADERS)
