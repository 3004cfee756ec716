"""OpenAI's moderation endpoint under `/openai`: `POST /openai/v1/moderations` and `GET /openai/v1/models`.

Auth: `Authorization: Bearer <any non-empty key>`, else 401. Errors are
`{"error": {"message", "type", "param", "code"}}`; 429 and 5xx carry `Retry-After`.
Request `{"model", "input"}`: a string, a list of strings (one result each) or a list of parts
(`{"type": "text", "text"}`, `{"type": "image_url", "image_url": {"url"}}`, one result in all).
An image is a data URI (at most 20 MB) or an http(s) URL the emulator fetches.

What it flags, with no offensive content anywhere: text holding `forbidden-content` (the word the
video dialects refuse) as `illicit` (score 0.97, applied to text); an image carrying the flag
marker (emulator/flag_marker.py: a magenta/green checker in the top-left corner) as `violence`
(0.96, applied to image). Every other score is 0.0001. No job is made: the submit faults of
`/_sim/faults` apply to the call (`submit_status` + `submit_status_count`, `submit_outage_s`,
`submit_hang_after_create` for an answer that never comes in time).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import uuid
from typing import Literal

import httpx
from fastapi import APIRouter, Depends, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from emulator.dialects import DialectError, retry_headers
from emulator.engine import Engine, EngineRefusal
from emulator.flag_marker import UnreadableImage, image_carries_marker
from emulator.wire import MODERATED_WORD

PREFIX = "openai"
MODEL_VERSION = "omni-moderation-2024-09-26"  # what `omni-moderation-latest` answers as
DATA_URI_MAX = 20 * 1024 * 1024
CATEGORIES = ("harassment", "harassment/threatening", "hate", "hate/threatening", "illicit", "illicit/violent",
              "self-harm", "self-harm/intent", "self-harm/instructions", "sexual", "sexual/minors", "violence",
              "violence/graphic")
IMAGE_CATEGORIES = frozenset({"self-harm", "self-harm/intent", "self-harm/instructions", "sexual", "violence",
                              "violence/graphic"})
LOW_SCORE = 0.0001


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class ImageUrl(BaseModel):
    url: str = Field(min_length=1)


class ImagePart(BaseModel):
    type: Literal["image_url"]
    image_url: ImageUrl


class ModerationIn(BaseModel):
    model: str = "omni-moderation-latest"
    input: str | list[str] | list[TextPart | ImagePart]


def _error(status: int, message: str, *, kind: str = "invalid_request_error", code: str | None = None,
           retry_after_s: float | None = None) -> DialectError:
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return DialectError(JSONResponse(body, status_code=status, headers=retry_headers("Retry-After", retry_after_s)))


def invalid_request(exc: RequestValidationError) -> JSONResponse:
    first = exc.errors()[0] if exc.errors() else {}
    where = ".".join(str(p) for p in first.get("loc", ())[1:])
    return _error(400, f"Invalid value for '{where}': {first.get('msg', 'invalid')}").response


def require_auth(authorization: str | None = Header(default=None)) -> None:
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise _error(401, "Incorrect API key provided.", code="invalid_api_key")


def _refused(exc: EngineRefusal) -> DialectError:
    kind = "requests" if exc.status == 429 else "server_error"
    code = "rate_limit_exceeded" if exc.status == 429 else None
    return _error(exc.status, exc.message, kind=kind, code=code, retry_after_s=exc.retry_after_s)


def result_json(texts: list[str], flagged_image: bool, has_image: bool) -> dict:
    """One result over the texts and images of one input, as omni-moderation writes it."""
    hits = {"illicit"} if any(MODERATED_WORD in t.casefold() for t in texts) else set()
    if flagged_image:
        hits.add("violence")
    scores = {c: LOW_SCORE for c in CATEGORIES}
    scores.update({c: 0.97 if c == "illicit" else 0.96 for c in hits})
    applied = {}
    for c in CATEGORIES:
        types = (["text"] if texts else []) + (["image"] if has_image and c in IMAGE_CATEGORIES else [])
        applied[c] = types
    return {"flagged": bool(hits), "categories": {c: c in hits for c in CATEGORIES}, "category_scores": scores,
            "category_applied_input_types": applied}


async def _image_bytes(url: str, max_bytes: int, timeout_s: float) -> bytes:
    if url.startswith("data:"):
        if len(url) > DATA_URI_MAX:
            raise _error(400, "Image data URI is larger than 20 MB.", code="image_too_large")
        header, _, data = url.partition(",")
        if not header.endswith(";base64"):
            raise _error(400, "Image data URI must be base64-encoded.", code="invalid_image_url")
        try:
            return base64.b64decode(data, validate=True)
        except binascii.Error:
            raise _error(400, "Image data URI is not valid base64.", code="invalid_image_url") from None
    if not url.startswith(("http://", "https://")):
        raise _error(400, "Image URL must be http(s) or a data URI.", code="invalid_image_url")
    return await asyncio.to_thread(_fetch, url, max_bytes, timeout_s)


def _fetch(url: str, max_bytes: int, timeout_s: float) -> bytes:
    try:
        with httpx.stream("GET", url, timeout=timeout_s) as resp:
            resp.raise_for_status()
            chunks, size = [], 0
            for chunk in resp.iter_bytes():
                size += len(chunk)
                if size > max_bytes:
                    raise _error(400, "Image is too large.", code="image_too_large")
                chunks.append(chunk)
            return b"".join(chunks)
    except httpx.HTTPError:
        raise _error(400, "Failed to download image from the URL.", code="invalid_image_url") from None


def router(engine: Engine) -> APIRouter:
    api = APIRouter(prefix=f"/{PREFIX}/v1", dependencies=[Depends(require_auth)])

    @api.post("/moderations")
    async def moderations(body: ModerationIn, request: Request) -> dict:
        try:
            await engine.answer_now(request, PREFIX)
        except EngineRefusal as exc:
            raise _refused(exc) from None
        if isinstance(body.input, str) or all(isinstance(i, str) for i in body.input):
            texts = [body.input] if isinstance(body.input, str) else list(body.input)
            results = [result_json([t], False, False) for t in texts]
        else:
            texts = [p.text for p in body.input if isinstance(p, TextPart)]
            images = [p.image_url.url for p in body.input if isinstance(p, ImagePart)]
            flagged = False
            for url in images:
                data = await _image_bytes(url, engine.config.max_image_bytes, engine.config.fetch_timeout_s)
                try:
                    flagged = await asyncio.to_thread(image_carries_marker, data) or flagged
                except UnreadableImage:
                    raise _error(400, "The image could not be read.", code="invalid_image_format") from None
            results = [result_json(texts, flagged, bool(images))]
        return {"id": f"modr-{uuid.uuid4().hex}", "model": MODEL_VERSION, "results": results}

    @api.get("/models")
    def models() -> dict:
        return {"object": "list", "data": [{"id": m, "object": "model", "created": 1727308800, "owned_by": "system"}
                                            for m in ("omni-moderation-latest", MODEL_VERSION)]}

    return api
