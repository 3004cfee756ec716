"""Source images: fetched once per import, stored under their sha256, checked with bounded concurrency.

A relative path is read next to the catalog file (the demo ships its images); a URL goes through
the SSRF-safe fetcher. Unreachable images are retried a few times, then sent to human review.
"""

from __future__ import annotations

import hashlib
import io
import mimetypes
import threading
import time
from collections import defaultdict
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import BaseModel

from adapters.fetcher import FetchError, FetchRefused, SafeFetcher
from adapters.storage import ObjectStorage
from schema.assets import record_asset
from schema.models import Asset

MAX_IMAGE_BYTES = 25 * 1024 * 1024
IMAGE_TIMEOUT_S = 10.0  # per try; a resolve makes up to RETRIES + 1 tries
RETRIES = 2
RETRY_PAUSE_S = 0.2
PER_HOST = 4  # concurrent downloads from one host


class ImageOutcome(BaseModel):
    source: str
    sha256: str | None = None  # of the bytes; None when the image could not be read
    size: int = 0
    content_type: str | None = None
    key: str | None = None  # object key when stored
    error: str | None = None  # a sentence for the report: why the image could not be used


def is_url(source: str) -> bool:
    return urlsplit(source).scheme.lower() in ("http", "https")


def image_key(tenant: str, sha256: str, content_type: str | None) -> str:
    ext = mimetypes.guess_extension(content_type or "") or ".img"
    return f"tenants/{tenant}/images/{sha256}{ext}"


def image_fetcher(settings, timeout_s: float = IMAGE_TIMEOUT_S) -> SafeFetcher:  # noqa: ANN001 - Settings
    """The SSRF-safe fetcher for catalog images: the configured hosts, the image size cap."""
    return SafeFetcher(settings.allowed_fetch_hosts(), max_bytes=MAX_IMAGE_BYTES, timeout_s=timeout_s)


def image_business_key(tenant: str, sha256: str) -> str:
    """An input image's asset business key: one per tenant and content."""
    return f"image:{tenant}:{sha256}"


def record_image_asset(session, bucket: str, tenant: str, image: ImageOutcome) -> Asset:  # noqa: ANN001 - Session
    """The INPUT_IMAGE row of a stored image, one per tenant and sha256 (import and validation share it)."""
    return record_asset(
        session, business_key=image_business_key(tenant, image.sha256), tenant_id=tenant, kind="INPUT_IMAGE",
        bucket=bucket, key=image.key, size=image.size, sha256=image.sha256, mime=image.content_type,
        meta={"source": image.source},
    )


def url_identity(source: str) -> str:
    """Identity hash of an image we did not download (URL checks off): the URL itself."""
    return hashlib.sha256(f"url:{source}".encode()).hexdigest()


class ImageResolver:
    def __init__(self, fetcher: SafeFetcher, storage: ObjectStorage | None, tenant: str, base_dir: Path):
        self.fetcher = fetcher
        self.storage = storage  # None: dry run, read and hash only
        self.tenant = tenant
        self.base_dir = base_dir
        self._cache: dict[str, ImageOutcome] = {}
        self._guard = threading.Lock()
        self._source_locks: dict[str, threading.Lock] = {}
        self._host_gates: defaultdict[str, threading.Semaphore] = defaultdict(lambda: threading.Semaphore(PER_HOST))
        self._dead_hosts: dict[str, str] = {}  # host -> why its name did not resolve (once per import)
        self._host_probed: dict[str, threading.Event] = {}  # set once the host's first fetch has ended

    def resolve(self, source: str) -> ImageOutcome:
        """Read (and store) one image; the same source is only read once per import."""
        with self._guard:
            lock = self._source_locks.setdefault(source, threading.Lock())
        with lock:  # two products with one image URL: one fetch, the second waits for it
            if source not in self._cache:
                self._cache[source] = self._resolve(source)
            return self._cache[source]

    def _resolve(self, source: str) -> ImageOutcome:
        if is_url(source):
            data, content_type, error = self._download(source)
        else:
            data, content_type, error = self._read_local(source)
        if data is None:
            return ImageOutcome(source=source, error=error)
        sha = hashlib.sha256(data).hexdigest()
        out = ImageOutcome(source=source, sha256=sha, size=len(data), content_type=content_type)
        if self.storage is not None:
            out.key = self.storage.put_bytes(image_key(self.tenant, sha, content_type), data,
                                             content_type or "application/octet-stream").key
        return out

    def _read_local(self, source: str) -> tuple[bytes | None, str | None, str | None]:
        path = (self.base_dir / source).resolve()
        if not path.is_relative_to(self.base_dir.resolve()):
            return None, None, "relative image path leaves the catalog's folder"
        if not path.is_file():
            return None, None, f"image file not found next to the catalog: {source}"
        return path.read_bytes(), mimetypes.guess_type(path.name)[0], None

    def _download(self, url: str) -> tuple[bytes | None, str | None, str | None]:
        """Fetch with retries; the first URL of a host goes alone, so a dead host costs one probe."""
        host = (urlsplit(url).hostname or "").lower()
        with self._guard:
            first = host not in self._host_probed
            probed = self._host_probed.setdefault(host, threading.Event())
        if not first:
            probed.wait()
        try:
            return self._fetch_with_retries(url, host)
        finally:
            probed.set()

    def _fetch_with_retries(self, url: str, host: str) -> tuple[bytes | None, str | None, str | None]:
        with self._host_gates[host]:
            for attempt in range(1, RETRIES + 2):
                if host in self._dead_hosts:
                    return None, None, self._dead_hosts[host]
                sink = io.BytesIO()
                try:
                    result = self.fetcher.fetch_to(url, sink)
                    return sink.getvalue(), result.content_type, None
                except FetchRefused as exc:
                    return None, None, f"image URL refused: {exc}"
                except FetchError as exc:
                    error = f"image unreachable after {attempt} tries: {exc}"
                    if not exc.retryable:
                        return None, None, f"image unreachable: {exc}"
                    if exc.dns and attempt == RETRIES + 1:
                        self._dead_hosts[host] = f"image host {host} did not resolve after {attempt} tries: {exc}"
                if attempt <= RETRIES:
                    time.sleep(RETRY_PAUSE_S * attempt)
            return None, None, error
