"""Reviewer tokens: who may review which import until when, signed with the stack's review secret.

A token is `base64url(claims).base64url(HMAC-SHA256(secret, claims))`; the claims name the import,
the reviewer, the expiry and the scope: a `review` token opens the gallery and the import's overview
page, an `overview` token the overview only. The gateway refuses a missing, expired, forged,
other-import or out-of-scope token.
Pure functions (no I/O): the CLI issues tokens, the gateway verifies them, unit tests exercise both.
The CSRF token of a gallery page is derived from its reviewer token, so it needs no server state.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time

from pydantic import BaseModel, ValidationError

DEFAULT_TTL_S = 12 * 3600
REVIEW, OVERVIEW = "review", "overview"  # scopes: what a token opens


class TokenRefused(Exception):
    """The token does not grant access; the message says why without echoing the token.
    `other_import`: a valid token, for another import or page (forbidden rather than unauthenticated)."""

    def __init__(self, reason: str, *, other_import: bool = False):
        super().__init__(reason)
        self.other_import = other_import


class Reviewer(BaseModel):
    imp: str  # the import the token is for
    sub: str  # the reviewer's name, recorded with each decision
    exp: int  # unix seconds
    scope: str = REVIEW  # tokens issued before scopes existed are reviewer tokens


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(secret: str, data: bytes) -> bytes:
    if not secret:
        raise TokenRefused("reviewing is not configured (no review secret)")
    return hmac.new(secret.encode(), data, hashlib.sha256).digest()


def issue(secret: str, import_id: str, reviewer: str, *, ttl_s: float = DEFAULT_TTL_S, now: float | None = None,
          scope: str = REVIEW) -> str:
    claims = Reviewer(imp=import_id, sub=reviewer, exp=int((now or time.time()) + ttl_s), scope=scope)
    body = json.dumps(claims.model_dump(), separators=(",", ":"), sort_keys=True).encode()
    return f"{_b64(body)}.{_b64(_mac(secret, body))}"


def verify(secret: str, token: str | None, import_id: str, *, now: float | None = None,
           previous: str = "", scopes: tuple[str, ...] = (REVIEW,)) -> Reviewer:
    """The reviewer the token names, or TokenRefused (missing, malformed, forged, expired, other import,
    a scope not in `scopes`). A token signed with `previous` (the key being retired during a rotation)
    is still accepted."""
    if not token:
        raise TokenRefused("a reviewer token is required (reelqueue review IMPORT_ID prints a link)")
    try:
        body_part, mac_part = token.split(".")
        body, mac = _unb64(body_part), _unb64(mac_part)
    except (ValueError, binascii.Error):
        raise TokenRefused("the reviewer token is malformed") from None
    if not any(hmac.compare_digest(mac, _mac(key, body)) for key in _keys(secret, previous)):
        raise TokenRefused("the reviewer token is not valid")
    try:
        claims = Reviewer.model_validate_json(body)
    except ValidationError:
        raise TokenRefused("the reviewer token is malformed") from None
    if claims.exp <= (now or time.time()):
        raise TokenRefused("the reviewer token has expired; ask for a new link")
    if claims.imp != import_id:
        raise TokenRefused("the reviewer token is for another import", other_import=True)
    if claims.scope not in scopes:
        raise TokenRefused(f"this link opens the import's {claims.scope} page only", other_import=True)
    return claims


def _keys(secret: str, previous: str) -> list[str]:
    return [secret] + ([previous] if previous else [])


def csrf_token(secret: str, token: str) -> str:
    """What a gallery page sends back in X-CSRF-Token with each POST (derived, not stored)."""
    return _b64(_mac(secret, b"csrf:" + token.encode()))


def csrf_ok(secret: str, token: str, sent: str | None) -> bool:
    """The page's CSRF token came back (a non-ASCII header is simply wrong, never an error)."""
    return bool(sent) and sent.isascii() and hmac.compare_digest(sent, csrf_token(secret, token))
