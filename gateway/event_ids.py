"""Event ids as a tenant sees them: the feed's cursor (schema/event_feed.py) sealed for that tenant.

A cursor is made of Postgres snapshots (`xmin:xmax:xip`), global across tenants: read in the clear
over time it gauges the whole platform's transaction rate. Every id that leaves the gateway (an SSE
`id:` line, a keep-alive's, a JSON page's `last_event_id`) is the cursor encrypted with AES-GCM under
a key derived (HKDF-SHA256, a label of its own) from the media-link secret, the tenant's id as
associated data, the plain text padded to a power of two (at least PAD_MIN bytes) so that an id's
length does not count the running transactions either. An id is opened only for the tenant it was
sealed for; a plain cursor, a forged or altered id, or another tenant's, is refused as not an event
id of this stream (docs/architecture.md, "Live status").
"""

from __future__ import annotations

import base64
import binascii
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from schema.event_feed import MAX_CURSOR_CHARS, BadCursor, Cursor

PREFIX = "e1."  # the form of the id: a new one can be told apart from this one
PAD_MIN = 256
_NONCE, _TAG = 12, 16
_LABEL = b"reelqueue event id v1"
# the longest id: a cursor at the cap, padded, sealed and encoded (what the header may carry)
MAX_EVENT_ID_CHARS = len(PREFIX) + -(-(_NONCE + MAX_CURSOR_CHARS + _TAG) * 4 // 3)
REFUSED = "Last-Event-ID is not an event id of this stream"


class EventIds:
    """Seals with the current key; opens with it or the previous one (a media-link key being
    retired: ids handed out before the rotation resume until it is dropped)."""

    def __init__(self, secret: bytes, previous: bytes = b"") -> None:
        self._keys = [AESGCM(_derive(k)) for k in (secret, previous) if k]

    @classmethod
    def from_settings(cls, settings) -> EventIds | None:  # noqa: ANN001 - config.Settings
        """None without a media-link secret (the gateway refuses to start then; a test app may lack it)."""
        if not settings.media_link_secret:
            return None
        return cls(settings.media_link_secret.encode(), settings.media_link_secret_previous.encode())

    def seal(self, tenant_id: str, cursor: str) -> str:
        plain = cursor.encode()
        nonce = os.urandom(_NONCE)
        sealed = self._keys[0].encrypt(nonce, plain.ljust(_padded(len(plain)), b" "), _aad(tenant_id))
        return PREFIX + base64.urlsafe_b64encode(nonce + sealed).rstrip(b"=").decode()

    def open(self, tenant_id: str, event_id: str) -> Cursor:
        """The cursor `event_id` holds, or BadCursor (too long, not sealed, not this tenant's)."""
        if len(event_id) > MAX_EVENT_ID_CHARS or not event_id.startswith(PREFIX):
            raise BadCursor(REFUSED)
        body = event_id.removeprefix(PREFIX)
        try:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        except (binascii.Error, ValueError) as exc:
            raise BadCursor(REFUSED) from exc
        for key in self._keys:
            try:
                plain = key.decrypt(raw[:_NONCE], raw[_NONCE:], _aad(tenant_id))
            except (InvalidTag, ValueError):
                continue
            return Cursor.parse(plain.rstrip(b" ").decode())
        raise BadCursor(REFUSED)


def _derive(secret: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_LABEL).derive(secret)


def _aad(tenant_id: str) -> bytes:
    return _LABEL + b"\0" + tenant_id.encode()


def _padded(length: int) -> int:
    """PAD_MIN, or the next power of two; a cursor past the cap is not padded (it is refused anyway)."""
    size = PAD_MIN
    while size < length:
        size *= 2
    return size if size <= MAX_CURSOR_CHARS else length
