"""AWS Signature V4 query-string signing with signed headers beyond `host` (minio's presigner signs
`host` only). A header that is signed must be sent with exactly the signed value, and S3 checks
`Content-Length` and `x-amz-checksum-sha256` against the body: a presigned PUT bound to them takes
only the declared bytes (docs/security.md, "Tenant threat model")."""

from __future__ import annotations

import hashlib
import hmac
from datetime import datetime
from urllib.parse import quote


def _hmac(key: bytes, message: str) -> bytes:
    return hmac.new(key, message.encode(), hashlib.sha256).digest()


def _encode(value: str, safe: str = "-_.~") -> str:
    return quote(value, safe=safe)


def presign(*, method: str, scheme: str, host: str, path: str, access_key: str, secret_key: str, region: str,
            now: datetime, expires_s: int, headers: dict[str, str] | None = None,
            query: dict[str, str] | None = None) -> str:
    """The URL for `method` on `path` (the object's path, e.g. `/bucket/key`) with `query` (e.g. a
    multipart upload's part), valid for `expires_s` from `now` (UTC), with `headers` (and `host`) signed."""
    signed = {"host": host, **{name.lower(): value.strip() for name, value in (headers or {}).items()}}
    names = ";".join(sorted(signed))
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    scope = f"{day}/{region}/s3/aws4_request"
    query = {**(query or {}), "X-Amz-Algorithm": "AWS4-HMAC-SHA256", "X-Amz-Credential": f"{access_key}/{scope}",
             "X-Amz-Date": amz_date, "X-Amz-Expires": str(expires_s), "X-Amz-SignedHeaders": names}
    canonical_query = "&".join(f"{_encode(k)}={_encode(v)}" for k, v in sorted(query.items()))
    canonical_path = _encode(path, safe="/-_.~")
    canonical = "\n".join([method, canonical_path, canonical_query,
                           "".join(f"{name}:{signed[name]}\n" for name in sorted(signed)), names, "UNSIGNED-PAYLOAD"])
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = _hmac(_hmac(_hmac(_hmac(f"AWS4{secret_key}".encode(), day), region), "s3"), "aws4_request")
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    return f"{scheme}://{host}{canonical_path}?{canonical_query}&X-Amz-Signature={signature}"
