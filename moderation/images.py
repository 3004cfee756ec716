"""Images as the moderators that take bytes see them (Rekognition, the local classifier): a subject's
data URIs decoded, all checked against the caps and for their format (JPEG or PNG, by the magic
number: catalog/images.py `image_format`) before any is judged, so a frame list with one bad frame
sends nothing. An https URL is not fetched here: those moderators judge bytes we hold."""

from __future__ import annotations

import base64
import binascii

from catalog.images import image_format
from contracts.moderation import FramesSubject, ImageSubject, ModeratorError

JUDGED_FORMATS = frozenset({"JPEG", "PNG"})  # what every moderator that takes bytes reads


def jpeg_or_png(data: bytes) -> bool:
    return image_format(data) in JUDGED_FORMATS


def data_uri_bytes(url: str, max_bytes: int, who: str) -> bytes:
    """The bytes of a base64 data URI, refused (final) when over `max_bytes` or unreadable."""
    if not url.startswith("data:"):
        raise ModeratorError(f"{who} judges image bytes: a data URI, not a URL", retryable=False)
    header, _, payload = url.partition(",")
    if not header.endswith(";base64"):
        raise ModeratorError(f"{who}: the data URI is not base64", retryable=False)
    if len(payload) > (max_bytes + 2) // 3 * 4:  # base64 of max_bytes, checked before decoding
        raise ModeratorError(f"{who}: image over {max_bytes} bytes: not judged", retryable=False)
    try:
        data = base64.b64decode(payload, validate=True)
    except binascii.Error:
        raise ModeratorError(f"{who}: the data URI is not valid base64", retryable=False) from None
    if len(data) > max_bytes:
        raise ModeratorError(f"{who}: image over {max_bytes} bytes: not judged", retryable=False)
    return data


def subject_images(subject: ImageSubject | FramesSubject, max_bytes: int,
                   who: str) -> list[tuple[float | None, bytes]]:
    """(frame time or None, bytes) for each image of the subject, every one decoded, capped and found
    JPEG or PNG first."""
    urls = [(None, subject.url)] if isinstance(subject, ImageSubject) else [(f.at_s, f.url) for f in subject.frames]
    images = [(at_s, data_uri_bytes(url, max_bytes, who)) for at_s, url in urls]
    for at_s, data in images:
        if not jpeg_or_png(data):
            where = "" if at_s is None else f" (frame at {at_s:g} s)"
            raise ModeratorError(f"{who}: only JPEG or PNG{where}", retryable=False)
    return images
