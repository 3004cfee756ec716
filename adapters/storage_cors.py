"""The bucket's CORS rules for uploads from a browser: a page on the gateway's origin PUTs the
bytes straight to a presigned URL (and each part of a multipart upload, whose ETag it reads back).
Only those origins, only PUT, only the headers the ticket names (Content-Type, and the sha256 a
single PUT is bound to); docs/deploy.md, "Uploads from a browser"."""

from __future__ import annotations

import base64
import hashlib
from urllib.parse import urlsplit
from xml.sax.saxutils import escape

from adapters.storage import ObjectStorage

METHODS = ("PUT",)
HEADERS = ("content-type", "x-amz-checksum-sha256")  # the ticket's headers: a single PUT is bound to its sha256
EXPOSED = ("ETag",)
MAX_AGE_S = 600


def origin_of(url: str) -> str | None:
    """`scheme://host[:port]` of an http(s) URL, or None for anything else (an empty setting)."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}".lower()


def browser_origins(*urls: str) -> list[str]:
    """The origins of the given gateway URLs; a loopback address also as `localhost` (one page, two names)."""
    found: list[str] = []
    for url in urls:
        origin = origin_of(url)
        if origin is None:
            continue
        for twin in (origin, origin.replace("://127.0.0.1", "://localhost")):
            if twin not in found:
                found.append(twin)
    return found


def cors_xml(origins: list[str]) -> bytes:
    rule = "".join(f"<AllowedOrigin>{escape(o)}</AllowedOrigin>" for o in origins)
    rule += "".join(f"<AllowedMethod>{m}</AllowedMethod>" for m in METHODS)
    rule += "".join(f"<AllowedHeader>{h}</AllowedHeader>" for h in HEADERS)
    rule += "".join(f"<ExposeHeader>{h}</ExposeHeader>" for h in EXPOSED)
    rule += f"<MaxAgeSeconds>{MAX_AGE_S}</MaxAgeSeconds>"
    return f"<CORSConfiguration><CORSRule>{rule}</CORSRule></CORSConfiguration>".encode()


def allow_browser_uploads(storage: ObjectStorage, origins: list[str]) -> None:
    """Replace the bucket's CORS configuration (S3 PutBucketCors) with one rule for `origins`.
    The pinned minio client has no call for it, so the request goes through its signed `_execute`."""
    if not origins:
        raise ValueError("no origin to allow")
    body = cors_xml(origins)
    md5 = base64.b64encode(hashlib.md5(body).digest()).decode()  # noqa: S324 - S3 requires Content-MD5 here
    storage.client._execute("PUT", storage.bucket, body=body, headers={"Content-MD5": md5},  # noqa: SLF001
                            query_params={"cors": ""})
