"""What never reaches a log line: media tokens, query strings (signed URLs and reviewer tokens travel
there), bearer tokens, and the values of the secrets a process was configured with."""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit

REDACTED = "[redacted]"
_MEDIA_TOKEN = re.compile(r"(/media/)[^/?#\s]+")
_QUERY = re.compile(r"\?[^\s\"]+")
_BEARER = re.compile(r"(?i)(bearer\s+)[^\s\"',]+")
_MIN_SECRET = 6  # shorter configured values (an empty one, "0") would blank ordinary text
_secrets: tuple[str, ...] = ()  # longest first: a secret holding another goes whole


def redact(text: str) -> str:
    """`text` without tokens, query strings or configured secret values."""
    text = _BEARER.sub(r"\g<1>" + REDACTED, text)
    text = _QUERY.sub("?" + REDACTED, _MEDIA_TOKEN.sub(r"\g<1>" + REDACTED, text))
    for value in _secrets:
        if value in text:
            text = text.replace(value, REDACTED)
    return text


def add_secrets(values: Iterable[str]) -> None:
    """Remember secret values (and a URL's password) to blank wherever they appear, longest first."""
    global _secrets
    found = set(_secrets)
    for value in values:
        password = urlsplit(value).password if "://" in value else None
        found.update(v for v in (value, password) if v and len(v) >= _MIN_SECRET)
    _secrets = tuple(sorted(found, key=len, reverse=True))


def secrets_of(settings) -> list[str]:
    """The values of the settings' secret fields (config/secrets.py names them)."""
    from config.secrets import SECRET_FIELDS

    return [str(getattr(settings, field, "") or "") for field in SECRET_FIELDS]
