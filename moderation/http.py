"""What the hosted moderators share on the wire: one call sent, its answer read under a cap.

A failed connection or a timeout is retryable (a moderation call changes nothing at the provider,
so asking again is always safe); an answer over the cap is final (a moderator that answers
megabytes is not one we can read). Messages go through `scrub` so no credential reaches a log.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx

from contracts.moderation import ModeratorError


def scrub(text: str, *secrets: str) -> str:
    """`text` with each secret (of 4 characters or more) replaced by `***`."""
    for secret in secrets:
        if len(secret) >= 4:
            text = text.replace(secret, "***")
    return text


def send_capped(client: httpx.Client, request: httpx.Request, cap: int, who: str,
                clean: Callable[[str], str]) -> tuple[httpx.Response, bytes]:
    """Send `request` once and read at most `cap` bytes of its answer."""
    try:
        resp = client.send(request, stream=True)
        try:
            chunks, size = [], 0
            for chunk in resp.iter_bytes():
                size += len(chunk)
                if size > cap:
                    raise ModeratorError(f"{who}: answer over {cap} bytes", retryable=False)
                chunks.append(chunk)
        finally:
            resp.close()
    except httpx.TransportError as exc:
        raise ModeratorError(clean(f"{who}: {exc!r}"), retryable=True) from exc
    return resp, b"".join(chunks)
