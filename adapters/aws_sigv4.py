"""AWS Signature Version 4 for the header form (`Authorization: AWS4-HMAC-SHA256 ...`), with
hashlib and hmac: the few AWS calls reelqueue makes (Rekognition) need no SDK and its retry loop.

`sign_request` signs an httpx request in place; `verify` is the same computation from the server's
side (the emulator's Rekognition dialect checks what a client signed). Checked against AWS's
published SigV4 test suite vectors (tests/unit/test_aws_sigv4.py). Not covered, as no call here
needs them: S3's single-encoded paths and UNSIGNED-PAYLOAD, presigned query signing.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from urllib.parse import parse_qsl, quote

import httpx
from pydantic import BaseModel, ConfigDict

ALGORITHM = "AWS4-HMAC-SHA256"
TERMINATOR = "aws4_request"
AMZ_DATE_FORMAT = "%Y%m%dT%H%M%SZ"


class Credentials(BaseModel):
    model_config = ConfigDict(frozen=True)

    access_key_id: str
    secret_access_key: str
    session_token: str | None = None  # temporary credentials: sent and signed as x-amz-security-token


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    """kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region), service), "aws4_request")."""
    key = _hmac(f"AWS4{secret}".encode(), date)
    for part in (region, service, TERMINATOR):
        key = _hmac(key, part)
    return key


def _encode(text: str) -> str:
    return quote(text, safe="-_.~")


def canonical_path(raw_path: str) -> str:
    """Each segment of the path as sent, URI-encoded once more (every service but S3)."""
    return "/".join(_encode(segment) for segment in (raw_path or "/").split("/")) or "/"


def canonical_query(raw_query: str) -> str:
    pairs = [(_encode(k), _encode(v)) for k, v in parse_qsl(raw_query, keep_blank_values=True)]
    return "&".join(f"{k}={v}" for k, v in sorted(pairs))


def _header_value(value: str) -> str:
    return re.sub(r"\s+", " ", value.strip())


def canonical_request(method: str, raw_path: str, raw_query: str, headers: Mapping[str, str],
                      signed: Sequence[str], payload_hash: str) -> str:
    """The canonical request; `headers` by lower-case name, `signed` sorted lower-case names."""
    lines = "".join(f"{name}:{_header_value(headers[name])}\n" for name in signed)
    return "\n".join([method.upper(), canonical_path(raw_path), canonical_query(raw_query), lines,
                      ";".join(signed), payload_hash])


def string_to_sign(amz_date: str, scope: str, canonical: str) -> str:
    return "\n".join([ALGORITHM, amz_date, scope, sha256_hex(canonical.encode())])


def signature(secret: str, amz_date: str, region: str, service: str, canonical: str) -> str:
    scope = f"{amz_date[:8]}/{region}/{service}/{TERMINATOR}"
    key = signing_key(secret, amz_date[:8], region, service)
    return hmac.new(key, string_to_sign(amz_date, scope, canonical).encode(), hashlib.sha256).hexdigest()


def sign_request(request: httpx.Request, credentials: Credentials, region: str, service: str,
                 now: datetime | None = None) -> None:
    """Add `X-Amz-Date` (and the session token) and `Authorization` to `request`, signing every
    header it carries but the ones a proxy may rewrite (user-agent, accept-encoding, connection)."""
    amz_date = (now or datetime.now(UTC)).astimezone(UTC).strftime(AMZ_DATE_FORMAT)
    request.headers["X-Amz-Date"] = amz_date
    if credentials.session_token:
        request.headers["X-Amz-Security-Token"] = credentials.session_token
    headers = {k.lower(): v for k, v in request.headers.items()}
    signed = sorted(n for n in headers if n not in _UNSIGNED)
    url = request.url
    canonical = canonical_request(request.method, url.raw_path.decode().partition("?")[0], url.query.decode(),
                                  headers, signed, sha256_hex(request.content))
    request.headers["Authorization"] = (
        f"{ALGORITHM} Credential={credentials.access_key_id}/{amz_date[:8]}/{region}/{service}/{TERMINATOR}, "
        f"SignedHeaders={';'.join(signed)}, "
        f"Signature={signature(credentials.secret_access_key, amz_date, region, service, canonical)}")


_UNSIGNED = frozenset({"authorization", "user-agent", "accept-encoding", "accept", "connection", "content-length"})
_AUTHORIZATION = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<key>[^/\s,]+)/(?P<date>\d{8})/(?P<region>[a-z0-9-]+)/(?P<service>[a-z0-9-]+)"
    r"/aws4_request,\s*SignedHeaders=(?P<signed>[a-z0-9-]+(?:;[a-z0-9-]+)*),\s*Signature=(?P<signature>[0-9a-f]{64})$")


class Authorization(BaseModel):
    """An `Authorization` header's parts, as a server reads them."""

    model_config = ConfigDict(frozen=True)

    access_key_id: str
    date: str
    region: str
    service: str
    signed_headers: tuple[str, ...]
    signature: str


def parse_authorization(value: str | None) -> Authorization | None:
    """The header's parts, or None when it is not a SigV4 header of the expected form."""
    found = _AUTHORIZATION.match((value or "").strip())
    if found is None:
        return None
    return Authorization(access_key_id=found["key"], date=found["date"], region=found["region"],
                         service=found["service"], signed_headers=tuple(found["signed"].split(";")),
                         signature=found["signature"])


def verify(auth: Authorization, secret: str, method: str, raw_path: str, raw_query: str,
           headers: Mapping[str, str], body: bytes) -> bool:
    """Whether `auth` signs this request with `secret` (headers by lower-case name)."""
    amz_date = headers.get("x-amz-date", "")
    signed = list(auth.signed_headers)
    if amz_date[:8] != auth.date or "host" not in signed or signed != sorted(signed) or \
            any(name not in headers for name in signed):
        return False
    canonical = canonical_request(method, raw_path, raw_query, headers, signed, sha256_hex(body))
    expected = signature(secret, amz_date, auth.region, auth.service, canonical)
    return hmac.compare_digest(expected, auth.signature)
