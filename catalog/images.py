"""Source images: fetched once per import, stored under their sha256, checked with bounded concurrency.

A relative path is read next to the catalog file (the demo ships its images); a URL goes through
the SSRF-safe fetcher. Unreachable images are retried a few times, then sent to human review. What
is read must be a JPEG, PNG or WebP by its magic number, within the pixel cap; it is decoded and
re-encoded without metadata before it is stored (and so before a provider sees it); anything else
makes the row invalid.
"""

from __future__ import annotations

import hashlib
import io
import logging
import mimetypes
import threading
import time
from collections import defaultdict
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from PIL import Image, ImageOps
from pydantic import BaseModel

from adapters.fetcher import FetchError, FetchRefused, SafeFetcher
from adapters.storage import ObjectStorage
from schema.assets import record_asset
from schema.models import Asset

log = logging.getLogger(__name__)

MAX_IMAGE_BYTES = 25 * 1024 * 1024
IMAGE_TIMEOUT_S = 10.0  # per try; a resolve makes up to RETRIES + 1 tries
RETRIES = 2
RETRY_PAUSE_S = 0.2
PER_HOST = 4  # concurrent downloads from one host
MAX_IMAGE_PIXELS = 25_000_000  # width x height; checked from the header before anything is decoded
JPEG_QUALITY = 92
# Decoded images held at once (up to MAX_IMAGE_PIXELS x 4 bytes each), whatever the fetch concurrency.
_DECODE_SLOTS = threading.BoundedSemaphore(4)
# Magic numbers of the formats we accept, and the Pillow decoder each one may use (no other is tried).
_FORMATS = (
    (lambda head: head.startswith(b"\xff\xd8\xff"), "JPEG"),
    (lambda head: head.startswith(b"\x89PNG\r\n\x1a\n"), "PNG"),
    (lambda head: head[:4] == b"RIFF" and head[8:12] == b"WEBP", "WEBP"),
)


class ImageOutcome(BaseModel):
    source: str
    sha256: str | None = None  # of the bytes; None when the image could not be read
    size: int = 0
    content_type: str | None = None
    width: int | None = None  # pixels of the stored (normalised) image
    height: int | None = None
    key: str | None = None  # object key when stored
    error: str | None = None  # a sentence for the report: why the image could not be used
    invalid: bool = False  # the image itself is unusable (not an image, too large, path refused): row invalid


class ImageRejected(ValueError):
    """The bytes or the path are not an image we accept; the message is the report's reason."""


def normalised_image(data: bytes) -> tuple[bytes, str]:
    """(bytes, content type) of `data` re-encoded: JPEG stays JPEG, PNG and WebP become PNG; no metadata.

    The format comes from the magic number and only that decoder runs; the pixel count is checked
    from the header before the pixels are decoded (a small file can declare 20,000 x 20,000).
    """
    fmt = image_format(data)
    if fmt is None:
        raise ImageRejected("not an image: the file is not a JPEG, PNG or WebP (by its first bytes)")
    with _DECODE_SLOTS:
        try:
            with Image.open(io.BytesIO(data), formats=[fmt]) as image:
                width, height = image.size
                if width * height > MAX_IMAGE_PIXELS:
                    raise ImageRejected(f"image too large: {width} x {height} pixels "
                                        f"(at most {MAX_IMAGE_PIXELS:,} pixels)")
                image.load()
                clean = ImageOps.exif_transpose(image)  # the pixels as shown, before EXIF is dropped
        except ImageRejected:
            raise
        except Image.DecompressionBombError as exc:
            raise ImageRejected(f"image too large: {exc}") from exc
        except (OSError, SyntaxError, ValueError) as exc:  # the decoder's text is for the log, not the tenant
            log.info("%s image not decodable: %s", fmt, exc)
            raise ImageRejected(f"not a readable {fmt} image") from exc
        return _encoded(clean, fmt)


def image_size(clean: bytes) -> tuple[int, int]:
    """Width and height of an image `normalised_image` wrote, from its header."""
    with Image.open(io.BytesIO(clean), formats=[image_format(clean)]) as image:
        return image.size


def image_format(data: bytes) -> str | None:
    """JPEG, PNG or WEBP by the magic number at the start of `data`; None for anything else."""
    return next((name for matches, name in _FORMATS if matches(data[:16])), None)


def _encoded(image: Image.Image, fmt: str) -> tuple[bytes, str]:
    image.info.clear()  # ICC profile, EXIF, text chunks: none of it goes to storage or a provider
    out = io.BytesIO()
    if fmt == "JPEG":
        image.convert("RGB").save(out, format="JPEG", quality=JPEG_QUALITY)
        return out.getvalue(), "image/jpeg"
    mode = image.mode if image.mode in ("RGB", "RGBA", "L", "LA") else "RGBA"
    image.convert(mode).save(out, format="PNG")
    return out.getvalue(), "image/png"


def is_url(source: str) -> bool:
    return urlsplit(source).scheme.lower() in ("http", "https")


def image_key(tenant: str, sha256: str, content_type: str | None) -> str:
    ext = mimetypes.guess_extension(content_type or "") or ".img"
    return f"tenants/{tenant}/images/{sha256}{ext}"


def image_fetcher(settings, timeout_s: float = IMAGE_TIMEOUT_S) -> SafeFetcher:  # noqa: ANN001 - Settings
    """The SSRF-safe fetcher for catalog images, with the image size cap. Private addresses only for the
    hosts named in REELQUEUE_FETCH_ALLOWED_HOSTS: unlike provider outputs, nothing (not even the
    emulator's address) is added on its own."""
    return SafeFetcher(set(settings.fetch_allowed_hosts), max_bytes=MAX_IMAGE_BYTES, timeout_s=timeout_s)


def image_business_key(tenant: str, sha256: str) -> str:
    """An input image's asset business key: one per tenant and content."""
    return f"image:{tenant}:{sha256}"


def record_image_asset(session, bucket: str, tenant: str, image: ImageOutcome) -> Asset:  # noqa: ANN001 - Session
    """The INPUT_IMAGE row of a stored image, one per tenant and sha256 (import and validation share it)."""
    return record_asset(
        session, business_key=image_business_key(tenant, image.sha256), tenant_id=tenant, kind="INPUT_IMAGE",
        bucket=bucket, key=image.key, size=image.size, sha256=image.sha256, mime=image.content_type,
        width=image.width, height=image.height, meta={"source": image.source},
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
        try:
            data, error = self._download(source) if is_url(source) else self._read_local(source)
            if data is None:
                return ImageOutcome(source=source, error=error)
            data, content_type = normalised_image(data)
        except ImageRejected as exc:
            return ImageOutcome(source=source, error=str(exc), invalid=True)
        sha = hashlib.sha256(data).hexdigest()
        width, height = image_size(data)
        out = ImageOutcome(source=source, sha256=sha, size=len(data), content_type=content_type, width=width,
                           height=height)
        if self.storage is not None:
            out.key = self.storage.put_bytes(image_key(self.tenant, sha, content_type), data, content_type).key
        return out

    def _read_local(self, source: str) -> tuple[bytes | None, str | None]:
        """A file under the catalog's folder: no absolute path, no hidden name, no symlink that leads out."""
        relative = PurePosixPath(source)
        if relative.is_absolute() or any(part.startswith(".") for part in relative.parts):
            raise ImageRejected("relative image path must stay inside the catalog's folder and name no hidden file")
        base = self.base_dir.resolve()
        path = (base / relative).resolve()  # follows symlinks: one leading out is caught here
        if not path.is_relative_to(base):
            raise ImageRejected("relative image path leaves the catalog's folder")
        if any(part.startswith(".") for part in path.relative_to(base).parts):
            raise ImageRejected("relative image path leads to a hidden file through a symlink")
        if not path.is_file():
            return None, f"image file not found next to the catalog: {source}"
        if path.stat().st_size > MAX_IMAGE_BYTES:
            raise ImageRejected(f"image file larger than {MAX_IMAGE_BYTES} bytes")
        return path.read_bytes(), None

    def _download(self, url: str) -> tuple[bytes | None, str | None]:
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

    def _fetch_with_retries(self, url: str, host: str) -> tuple[bytes | None, str | None]:
        """The body (its declared Content-Type is never trusted: the bytes are checked after), or why not."""
        with self._host_gates[host]:
            for attempt in range(1, RETRIES + 2):
                if host in self._dead_hosts:
                    return None, self._dead_hosts[host]
                sink = io.BytesIO()
                try:
                    self.fetcher.fetch_to(url, sink)
                    return sink.getvalue(), None
                except FetchRefused as exc:
                    return None, f"image URL refused: {exc.public}"
                except FetchError as exc:  # the report says `public`; the detail is for the log only
                    log.info("image fetch failed (try %d): %s", attempt, exc.reason)
                    error = f"image unreachable after {attempt} tries: {exc.public}"
                    if not exc.retryable:
                        return None, f"image unreachable: {exc.public}"
                    if exc.dns and attempt == RETRIES + 1:
                        self._dead_hosts[host] = f"image host {host} did not resolve after {attempt} tries"
                if attempt <= RETRIES:
                    time.sleep(RETRY_PAUSE_S * attempt)
            return None, error
