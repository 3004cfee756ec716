"""GET /media/{token}/{file}: stored videos, HLS playlists and segments, thumbnails, behind signed links.

The token (delivery/links.py) grants one object folder until its expiry; the file is one name in
that folder. A playlist is served as stored, so its relative segment names resolve under the same
token and the whole stream plays from the one link handed out. Byte ranges are honoured (players
seek in MP4s with them). Refusals: 404 alike for a forged, malformed or expired token and for a file
that is not there or not a media file we serve (a link that is not valid tells nothing about what
exists; the log says why), 416 for a range outside the object.

Only the types in `SERVED` are answered, decided by the file name we wrote (never by the type an
upstream server declared), with `nosniff` and a CSP that runs nothing: no stored object, whatever
its bytes, is a page on the gateway's origin. `?download=1` asks for an attachment.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response, StreamingResponse

from adapters.storage import ObjectStorage, StoredObject
from delivery.links import LinkError, LinkSigner
from gateway.problems import ProblemError

log = logging.getLogger(__name__)
router = APIRouter()
CHUNK = 256 * 1024
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
# The files the pipeline writes (activities/fetch.py, activities/media.py, catalog/images.py), by extension.
SERVED = {
    ".mp4": "video/mp4",
    ".m3u8": "application/vnd.apple.mpegurl",
    ".ts": "video/mp2t",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".png": "image/png",
    ".webp": "image/webp",
}
# A stored type other than the served one (or none, or a generic binary type) means it is not our file.
_GENERIC = frozenset({"application/octet-stream", "binary/octet-stream"})
SAFETY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; sandbox",
    "Referrer-Policy": "no-referrer",
}


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
        log.info("media link refused: %s", exc)
        raise ProblemError(404, "no such media file", slug="media-not-found") from None
    media_type = served_type(name)
    stored = deps.storage.stat(key) if media_type is not None else None
    if stored is None or not _stored_as(stored, media_type):
        raise ProblemError(404, "no such media file", slug="media-not-found")
    start, length, status = _range(request.headers.get("range"), stored.size)
    disposition = "attachment" if request.query_params.get("download") == "1" else "inline"
    headers = {
        **SAFETY_HEADERS,
        "Accept-Ranges": "bytes",
        "Content-Length": str(length),
        "Cache-Control": "private, max-age=60",
        "Content-Disposition": f'{disposition}; filename="{name}"',  # FILE_NAME allows no quote or slash
    }
    if status == 206:
        headers["Content-Range"] = f"bytes {start}-{start + length - 1}/{stored.size}"
    if request.method == "HEAD" or length == 0:
        return Response(status_code=status, headers=headers, media_type=media_type)
    body = deps.storage.iter_object(key, CHUNK, offset=start, length=length)
    return StreamingResponse(body, status_code=status, headers=headers, media_type=media_type)


def served_type(name: str) -> str | None:
    """The Content-Type a file of this name is served with, or None when /media never serves it."""
    ext = name[name.rfind("."):].lower() if "." in name else ""
    return SERVED.get(ext)


def _stored_as(stored: StoredObject, media_type: str) -> bool:
    """The object was stored as this type (or as plain bytes): an HTML body named .png is not served."""
    declared = (stored.content_type or "").partition(";")[0].strip().lower()
    return not declared or declared == media_type or declared in _GENERIC


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
