"""Standard Webhooks verification (https://www.standardwebhooks.com), shared by provider adapters.

The PyPI `standardwebhooks` package checks the HMAC over the raw body; this wrapper adds what the
gateway needs around it: our own header and timestamp checks (so every refusal has a stable
reason that is safe to send back), and no exception other than WebhookRejected escapes.
Several space-separated `v1,` signatures are accepted (a provider signing with an old and a new
key while it rotates them); a replayed delivery id is the inbox's business, not the verifier's.
"""

from __future__ import annotations

import binascii
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from standardwebhooks import Webhook, WebhookVerificationError

from adapters.providers.base import WebhookRejected

TOLERANCE_S = 5 * 60  # older or further ahead than this: refused (the package checks the same)
KEPT_HEADERS = ("webhook-id", "webhook-timestamp")  # what may be stored; the signature never is


@dataclass(frozen=True)
class SignedDelivery:
    msg_id: str
    timestamp: datetime
    headers: dict[str, str]  # KEPT_HEADERS only


class StandardWebhookVerifier:
    """Checks `webhook-id`, `webhook-timestamp` and `webhook-signature` against one secret."""

    def __init__(self, secret: str):
        self._hook = Webhook(secret)  # `whsec_` + base64; raises on an empty secret

    def verify(self, headers: Mapping[str, str], body: bytes) -> SignedDelivery:
        lowered = {k.lower(): v for k, v in headers.items()}
        msg_id, stamp = lowered.get("webhook-id"), lowered.get("webhook-timestamp")
        if not (msg_id and stamp and lowered.get("webhook-signature")):
            raise WebhookRejected("missing webhook-id, webhook-timestamp or webhook-signature header")
        try:
            sent = int(stamp)
        except ValueError:
            raise WebhookRejected("webhook-timestamp is not a Unix time in seconds") from None
        skew = sent - time.time()
        if skew < -TOLERANCE_S:
            raise WebhookRejected("webhook-timestamp is too old")
        if skew > TOLERANCE_S:
            raise WebhookRejected("webhook-timestamp is too far in the future")
        try:
            self._hook.verify(body, lowered, json_parse=False)
        except WebhookVerificationError:
            raise WebhookRejected("no valid signature") from None
        except (ValueError, binascii.Error):  # a signature entry without "v1,", bad base64, a non-UTF-8 body
            raise WebhookRejected("malformed webhook-signature header or body") from None
        kept = {name: lowered[name] for name in KEPT_HEADERS}
        return SignedDelivery(msg_id=msg_id, timestamp=datetime.fromtimestamp(sent, UTC), headers=kept)


def verified(verifier: StandardWebhookVerifier | None, headers: Mapping[str, str], body: bytes) -> SignedDelivery:
    """The delivery, checked by the provider's verifier; refused when the provider has none."""
    if verifier is None:
        raise WebhookRejected("webhooks are not configured for this provider")
    return verifier.verify(headers, body)
