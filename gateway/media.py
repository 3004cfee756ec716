"""GET /media/{token}/{file}: stored videos, HLS playlists and segments, thumbnails, behind signed links.

The token (delivery/links.py) grants one object folder until its expiry; the file is one name in
that folder. A playlist is served as stored, so its relative segment names resolve under the same
token and the whole stream plays from the one link handed out. Byte ranges are honoured (players
seek in MP4s with them). Refusals: 403 for a forged, malformed or expired token, 404 for a file
that is not there, 416 for a range outside the object.
"""

from __future__ import annotations

import mimetypes
import re
from dataclasses import dataclass

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response, StreamingResponse

from adapters.storage import ObjectStorage, StoredObject
from delivery.links import LinkError, LinkSigner
from gateway.problems import ProblemError

router = APIRouter()
CHUNK = 256 * 1024
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
_TYPES = {".m3u8": "application/vnd.apple.mpegurl", ".ts": "video/mp2t", ".mp4": "video/mp4", ".jpg": "image/jpeg"}


@dataclass
class MediaDeps:
    storage: ObjectStorage
    signer: LinkSigner


def media_deps(request: Request) -> MediaDeps:
    """Built from Settings on first use (a test may set `app.state.media` first)."""
    state = request.app.state
    if getattr(state, "media", None) is None:
        from config.settings import Settings

        settings = Settings()
        state.media = MediaDeps(ObjectStorage.from_settings(settings), LinkSigner.from_settings(settings))
    return state.media


@router.api_route("/media/{token}/{name}", methods=["GET", "HEAD"])
def serve_media(token: str, name: str, request: Request, deps: MediaDeps = Depends(media_deps)) -> Response:
    try:
        key = deps.signer.key_for(token, name)
    except LinkError as exc:
        raise ProblemError(403, str(exc), slug="media-link-refused") from None
    stored = deps.storage.stat(key)
    if stored is None:
        raise ProblemError(404, "no such media file", slug="media-not-found")
    start, length, status = _range(request.headers.get("range"), stored.size)
    headers = {
        "Accept-Ranges": "bytes",
        "Content-Length": str(length),
        "Cache-Control": "private, max-age=60",
    }
    if status == 206:
        headers["Content-Range"] = f"bytes {start}-{start + length - 1}/{stored.size}"
    if request.method == "HEAD" or length == 0:
        return Response(status_code=status, headers=headers, media_type=_content_type(stored, name))
    body = deps.storage.iter_object(key, CHUNK, offset=start, length=length)
    return StreamingResponse(body, status_code=status, headers=headers, media_type=_content_type(stored, name))


def _content_type(stored: StoredObject, name: str) -> str:
    ext = name[name.rfind("."):].lower() if "." in name else ""
    return _TYPES.get(ext) or stored.content_type or mimetypes.guess_type(name)[0] or "application/octet-stream"


def _range(header: str | None, size: int) -> tuple[int, int, int]:
    """(start, length, status) for a single `bytes=` range; anything else is the whole object."""
    match = _RANGE.match(header or "")
    if match is None or not (match.group(1) or match.group(2)):
        return 0, size, 200
    first, last = match.group(1), match.group(2)
    if first:
        start = int(first)
        end = min(int(last), size - 1) if last else size - 1
    else:  # the last N bytes
        start, end = max(size - int(last), 0), size - 1
    if start >= size or end < start:
        raise ProblemError(416, "range outside the file", slug="range-not-satisfiable",
                           headers={"Content-Range": f"bytes */{size}"})
    return start, end - start + 1, 206
