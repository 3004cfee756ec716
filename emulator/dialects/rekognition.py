"""AWS Rekognition's `DetectModerationLabels` under `/rekognition`: `POST /rekognition/` with
`X-Amz-Target: RekognitionService.DetectModerationLabels` and an AWS JSON 1.1 body.

Auth: SigV4 (`Authorization: AWS4-HMAC-SHA256 Credential=...`), checked for its form, the access
key id the emulator knows (EMULATED_AWS_ACCESS_KEY_ID, secret EMULATED_API_KEY), the service
`rekognition`, an `X-Amz-Date` within 15 minutes, and the signature itself. Errors are AWS JSON
errors, `{"__type", "message"}` with the `x-amzn-ErrorType` header: a missing or malformed header
`MissingAuthenticationTokenException` (403), an unknown key `UnrecognizedClientException` (400),
a wrong signature or date `InvalidSignatureException` (403), bad input `InvalidImageFormatException`
or `ImageTooLargeException` (400, over 5 MB of bytes), `InvalidParameterException` (400), an
unknown target `UnknownOperationException` (400).

What it flags, with no offensive content anywhere: an image carrying the flag marker
(emulator/flag_marker.py) as `Violence > Graphic Violence` (confidence 96); any other JPEG or PNG
gets no label. The submit faults of `/_sim/faults` apply to the call, as for the OpenAI dialect:
an injected 429 answers 400 `ProvisionedThroughputExceededException` (AWS's throttling is not a
429), an injected 5xx or the outage `ThrottlingException` with that status (Rekognition's
"temporarily unable to process"), `submit_hang_after_create` holds the answer.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import uuid
from datetime import UTC, datetime

from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from adapters.aws_sigv4 import AMZ_DATE_FORMAT, parse_authorization, verify
from adapters.providers.http import EMULATED_API_KEY, EMULATED_AWS_ACCESS_KEY_ID
from emulator.dialects import DialectError
from emulator.engine import Engine, EngineRefusal
from emulator.flag_marker import UnreadableImage, image_carries_marker
from moderation.images import jpeg_or_png

PREFIX = "rekognition"
TARGET = "RekognitionService.DetectModerationLabels"
MODEL_VERSION = "7.0"
IMAGE_BYTES_MAX = 5 * 1024 * 1024
CLOCK_SKEW_S = 15 * 60
FLAG_LABELS = ({"Confidence": 96.0, "Name": "Violence", "ParentName": "", "TaxonomyLevel": 1},
               {"Confidence": 96.0, "Name": "Graphic Violence", "ParentName": "Violence", "TaxonomyLevel": 2})


class ImageIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    Bytes: str | None = None
    S3Object: dict | None = None


class DetectIn(BaseModel):
    Image: ImageIn
    MinConfidence: float = Field(default=50.0, ge=0, le=100)


def _error(status: int, kind: str, message: str) -> DialectError:
    return DialectError(JSONResponse({"__type": kind, "message": message}, status_code=status,
                                     headers={"x-amzn-ErrorType": kind, "x-amzn-RequestId": str(uuid.uuid4())},
                                     media_type="application/x-amz-json-1.1"))


def invalid_request(exc: RequestValidationError) -> JSONResponse:
    first = exc.errors()[0] if exc.errors() else {}
    return _error(400, "InvalidParameterException", f"Request has invalid parameters: {first.get('msg', '')}").response


def _refused(exc: EngineRefusal) -> DialectError:
    if exc.status == 429:
        return _error(400, "ProvisionedThroughputExceededException",
                      "The number of requests exceeded your throughput limit.")
    return _error(exc.status, "ThrottlingException", "Amazon Rekognition is temporarily unable to process the request.")


def _check_signature(request: Request, body: bytes) -> None:
    auth = parse_authorization(request.headers.get("authorization"))
    if auth is None:
        raise _error(403, "MissingAuthenticationTokenException", "Missing Authentication Token")
    if auth.access_key_id != EMULATED_AWS_ACCESS_KEY_ID:
        raise _error(400, "UnrecognizedClientException", "The security token included in the request is invalid.")
    try:
        signed_at = datetime.strptime(request.headers.get("x-amz-date", ""), AMZ_DATE_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        raise _error(403, "InvalidSignatureException", "X-Amz-Date is missing or malformed.") from None
    if auth.service != PREFIX or abs((datetime.now(UTC) - signed_at).total_seconds()) > CLOCK_SKEW_S:
        raise _error(403, "InvalidSignatureException", "Signature expired or signed for another service.")
    headers = {k.lower(): v for k, v in request.headers.items()}
    raw_path = (request.scope.get("raw_path") or request.url.path.encode()).decode().partition("?")[0]
    if not verify(auth, EMULATED_API_KEY, request.method, raw_path, request.url.query, headers, body):
        raise _error(403, "InvalidSignatureException",
                     "The request signature we calculated does not match the signature you provided.")


def _image_bytes(image: ImageIn) -> bytes:
    if image.Bytes is None:
        raise _error(400, "InvalidParameterException", "Image.Bytes is required (the emulator reads no S3 object).")
    try:
        data = base64.b64decode(image.Bytes, validate=True)
    except binascii.Error:
        raise _error(400, "InvalidParameterException", "Image.Bytes is not valid base64.") from None
    if len(data) > IMAGE_BYTES_MAX:
        raise _error(400, "ImageTooLargeException", "Image size is too large.")
    if not jpeg_or_png(data):
        raise _error(400, "InvalidImageFormatException", "Request has unsupported image format.")
    return data


def router(engine: Engine) -> APIRouter:
    api = APIRouter(prefix=f"/{PREFIX}")

    @api.post("/")
    async def detect_moderation_labels(request: Request) -> JSONResponse:
        body = await request.body()
        _check_signature(request, body)
        if request.headers.get("x-amz-target") != TARGET:
            raise _error(400, "UnknownOperationException", "The action or operation requested is invalid.")
        try:
            call = DetectIn.model_validate(json.loads(body))
        except (ValueError, ValidationError) as exc:
            message = f"Request has invalid parameters: {str(exc)[:200]}"
            raise _error(400, "InvalidParameterException", message) from None
        try:
            await engine.answer_now(request, PREFIX)
        except EngineRefusal as exc:
            raise _refused(exc) from None
        data = _image_bytes(call.Image)
        try:
            flagged = await asyncio.to_thread(image_carries_marker, data)
        except UnreadableImage:
            raise _error(400, "InvalidImageFormatException", "Request has unsupported image format.") from None
        labels = [dict(label) for label in FLAG_LABELS if flagged and label["Confidence"] >= call.MinConfidence]
        return JSONResponse({"ModerationLabels": labels, "ModerationModelVersion": MODEL_VERSION, "ContentTypes": []},
                            media_type="application/x-amz-json-1.1")

    return api
