"""Signed media links: `{gateway}/media/{token}/{file}`, where the token grants one folder until a time.

The token signs an object-key folder (a rendition's directory, e.g. the HLS playlist's) and an
expiry with HMAC-SHA256. Because the token is a path segment, the relative segment names inside an
HLS playlist resolve to the same token: `/media/{token}/index.m3u8` references `seg_0000.ts`, which
the player fetches as `/media/{token}/seg_0000.ts`. Playlists are served as stored, no rewriting,
and one link plays a whole stream (docs/architecture.md, "Delivery").
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import posixpath
import re
import time
from datetime import UTC, datetime

from pydantic import BaseModel

_SIG_BYTES = 20
FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")  # one path segment, no `..`, no slash


class LinkError(ValueError):
    """A token that is malformed, forged or expired (the gateway answers 403 or 404)."""


class MediaLink(BaseModel):
    url: str
    expires_at: datetime


class Grant(BaseModel):
    folder: str
    expires: int  # unix seconds


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class LinkSigner:
    """Signs with `key`; accepts tokens signed with it or with `previous` (a key being retired)."""

    def __init__(self, key: bytes, base_url: str, previous: bytes = b""):
        self._key = key
        self._keys = [k for k in (key, previous) if k]
        self.base_url = base_url.rstrip("/")

    @classmethod
    def from_settings(cls, settings) -> LinkSigner:  # noqa: ANN001 - config.Settings
        """Keyed by REELQUEUE_MEDIA_LINK_SECRET alone (no key derived from any other secret)."""
        return cls(settings.media_link_secret.encode(), settings.media_base_url(),
                   settings.media_link_secret_previous.encode())

    def _sign(self, body: str, key: bytes | None = None) -> str:
        if not (key or self._key):
            raise LinkError("media links are not configured (REELQUEUE_MEDIA_LINK_SECRET is not set)")
        return _b64(hmac.new(key or self._key, body.encode(), hashlib.sha256).digest()[:_SIG_BYTES])

    def _signed(self, body: str, sig: str) -> bool:
        if not sig.isascii():
            return False
        return any(hmac.compare_digest(sig, self._sign(body, key)) for key in self._keys)

    def token(self, folder: str, expires: int) -> str:
        body = _b64(json.dumps({"f": folder, "e": expires}, separators=(",", ":")).encode())
        return f"{body}.{self._sign(body)}"

    def link(self, key: str, ttl_s: float, *, now: float | None = None) -> MediaLink:
        """A link to the object `key`, valid for `ttl_s`; it also opens the files next to it."""
        folder, name = posixpath.split(key)
        expires = int((now if now is not None else time.time()) + ttl_s)
        return MediaLink(url=f"{self.base_url}/media/{self.token(folder, expires)}/{name}",
                         expires_at=datetime.fromtimestamp(expires, UTC))

    def verify(self, token: str, *, now: float | None = None) -> Grant:
        """The folder a token grants; LinkError if it is malformed, not ours, or expired."""
        body, _, sig = token.partition(".")
        if not body or not sig or not self._signed(body, sig):
            raise LinkError("invalid media token")
        try:
            data = json.loads(_unb64(body))
            grant = Grant(folder=data["f"], expires=data["e"])
        except (ValueError, KeyError, TypeError) as exc:
            raise LinkError("invalid media token") from exc
        if grant.expires < (now if now is not None else time.time()):
            raise LinkError("media link expired")
        return grant

    def key_for(self, token: str, name: str, *, now: float | None = None) -> str:
        """The object key a request for `name` under `token` may read."""
        grant = self.verify(token, now=now)
        if not FILE_NAME.match(name) or ".." in name:
            raise LinkError("invalid file name")
        return f"{grant.folder}/{name}"
