"""HMAC signatures: expiring output-file tokens and Standard Webhooks headers."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time


def _mac(key: bytes, message: str) -> bytes:
    return hmac.new(key, message.encode(), hashlib.sha256).digest()


def file_token(secret: str, job_id: str, expires_at: int) -> str:
    """`{expiry}-{signature}`: the URL itself proves which file it opens and until when."""
    sig = _mac(secret.encode(), f"{job_id}.{expires_at}").hex()[:40]
    return f"{expires_at}-{sig}"


def check_file_token(secret: str, job_id: str, token: str, *, now: float | None = None) -> bool:
    """True for an unexpired token this secret signed for this job."""
    expiry, _, _sig = token.partition("-")
    if not expiry.isdigit():
        return False
    expected = file_token(secret, job_id, int(expiry))
    return hmac.compare_digest(expected, token) and int(expiry) > (time.time() if now is None else now)


def webhook_headers(secret: str, msg_id: str, body: bytes, *, ts: int | None = None) -> dict[str, str]:
    """Standard Webhooks headers: v1 HMAC-SHA256 over `{id}.{timestamp}.{body}` keyed with the
    base64 after the `whsec_` prefix."""
    ts = int(time.time()) if ts is None else ts
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = _mac(key, f"{msg_id}.{ts}.{body.decode()}")
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(ts),
        "webhook-signature": "v1," + base64.b64encode(signed).decode(),
    }
