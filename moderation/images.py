"""Images as the moderators that take bytes see them (Rekognition, the local classifier): a subject's
data URIs decoded, all checked against the caps before any is judged, so a frame list with one bad
frame sends nothing. An https URL is not fetched here: those moderators judge bytes we hold."""

from __future__ import annotations

import base64
import binascii

from contracts.moderation import FramesSubject, ImageSubject, ModeratorError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
JPEG_MAGIC = b"\xff\xd8\xff"


def image_format(data: bytes) -> str | None:
    """`png` or `jpeg` from the first bytes; None for anything else."""
    if data.startswith(PNG_MAGIC):
        return "png"
    if data.startswith(JPEG_MAGIC):
        return "jpeg"
    return None


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
    """(frame time or None, bytes) for each image of the subject, every one decoded and capped first."""
    if isinstance(subject, ImageSubject):
        return [(None, data_uri_bytes(subject.url, max_bytes, who))]
    return [(frame.at_s, data_uri_bytes(frame.url, max_bytes, who)) for frame in subject.frames]
