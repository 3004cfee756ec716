"""Uploads through presigned URLs (docs/architecture.md, "Uploads: presigned, checked in quarantine").

The client declares name, size, type and sha256; the server picks the key (in a quarantine
prefix) and signs a PUT for that key only, or a multipart upload's parts for a large file. On
complete the object's size and sha256 must match what was declared, then the bytes are checked by
what they are, not by what the client said (magic number; images decoded under the catalog's pixel
cap and re-encoded without metadata; videos through ffprobe under the media caps; catalogs must be
text). Checked bytes leave quarantine for their own key and an `assets` row; the upload is READY.
Anything else is REJECTED with a reason and its bytes removed.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import secrets
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from minio.error import S3Error
from pydantic import BaseModel, ConfigDict, Field, field_validator

from adapters.media.ffmpeg_tools import MediaError, MediaLimitExceeded, MediaLimits
from adapters.media.transcode import check_input_caps, probe
from adapters.storage import ObjectStorage, file_sha256
from catalog.images import (
    MAX_IMAGE_BYTES,
    ImageRejected,
    image_format,
    image_key,
    image_size,
    normalised_image,
)
from contracts.tenant_text import UNSAFE
from schema import uploads as rows
from schema.db import Database
from schema.models import Asset, Upload

log = logging.getLogger(__name__)

IMAGE, VIDEO, CATALOG = "IMAGE", "VIDEO", "CATALOG"
# Declared types we take, and what the bytes must then turn out to be.
KIND_OF_TYPE = {
    "image/jpeg": IMAGE, "image/png": IMAGE, "image/webp": IMAGE,
    "video/mp4": VIDEO, "video/quicktime": VIDEO, "video/webm": VIDEO,
    "text/csv": CATALOG, "text/tab-separated-values": CATALOG, "text/plain": CATALOG,
}
# The stored key's suffix, by the checked type: a key is ours alone, never the client's file name
# (`v.` + 250 characters made a key S3 refuses: every complete answered 500)
SUFFIX_OF_TYPE = {"video/mp4": ".mp4", "video/quicktime": ".mov", "video/webm": ".webm",
                  "text/csv": ".csv", "text/tab-separated-values": ".tsv", "text/plain": ".txt"}
MAX_BYTES = {IMAGE: MAX_IMAGE_BYTES, VIDEO: 1024 * 1024 * 1024, CATALOG: 512 * 1024 * 1024}
MULTIPART_FROM = 16 * 1024 * 1024  # a larger file is sent in parts
MIN_PART = 8 * 1024 * 1024  # S3 wants at least 5 MiB per part but the last
MAX_PARTS = 1000
VALIDATION_LEASE_S = 15 * 60  # a VALIDATING upload untouched this long lost its validator: claimable again
MAX_PENDING = 100  # uploads of one tenant awaiting completion at once (an upload quota per tenant)
QUOTA_RETRY_S = 60  # Retry-After of a refusal by that quota
REAPPEARED_MARGIN = timedelta(days=1)  # how long after its URL expired an upload's quarantine is still looked at
TEXT_PROBE_BYTES = 1024 * 1024  # a catalog's first MiB must look like text
_BINARY_MAGIC = (b"PK\x03\x04", b"%PDF", b"\x1f\x8b", b"\x7fELF", b"MZ", b"GIF8", b"BM")
_GONE = ("NoSuchKey", "NoSuchObject", "NotFound", "ResourceNotFound")
_NAME = re.compile(r"^[^/\\\x00-\x1f\x7f\ud800-\udfff]{1,255}$")


class AssetRejected(ValueError):
    """The bytes are not what an upload of their kind may be; the message is the upload's reason."""


class _Missing(LookupError):
    """The quarantine object is not there (not uploaded yet, or moved on by a concurrent complete)."""


class UploadRefused(Exception):
    """The request cannot be done as asked: `status` and `slug` for the problem answer (and when to
    try again, for a quota)."""

    def __init__(self, status: int, slug: str, detail: str, *, retry_after_s: int | None = None):
        super().__init__(detail)
        self.status = status
        self.slug = slug
        self.detail = detail
        self.retry_after_s = retry_after_s


class UploadRequest(BaseModel):
    """`POST /v1/uploads`: what the client says it will send."""

    model_config = ConfigDict(extra="forbid")
    filename: str = Field(min_length=1, max_length=255, description="the file's name (no path)")
    size: int = Field(gt=0, le=MAX_BYTES[VIDEO], description="bytes")
    content_type: str = Field(max_length=100, description=", ".join(KIND_OF_TYPE))
    sha256: str = Field(pattern=r"^[0-9a-fA-F]{64}$", description="hex sha256 of the whole file")

    @field_validator("filename")
    @classmethod
    def _plain_name(cls, name: str) -> str:
        if not _NAME.match(name) or UNSAFE.search(name) or name in (".", ".."):
            raise ValueError("a file name without path separators, control characters or bidi controls")
        return name


class PartTicket(BaseModel):
    part_number: int
    size: int
    url: str


class UploadTicket(BaseModel):
    """Where and how to send the bytes: one PUT to `upload_url`, or each of `parts` PUT to its URL
    (keep each answer's ETag), then `POST /v1/uploads/{id}/complete`."""

    id: str
    status: str
    object_key: str
    upload_url: str | None
    method: str = "PUT"
    headers: dict[str, str]
    urls_expire_at: datetime
    complete_by: datetime
    part_size: int | None = None
    parts: list[PartTicket] | None = None


class CompletedPart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    part_number: int = Field(ge=1, le=MAX_PARTS)
    etag: str = Field(min_length=1, max_length=100)


class CompleteRequest(BaseModel):
    """Optional for a single PUT; for a multipart upload, the parts with the ETags S3 answered."""

    model_config = ConfigDict(extra="forbid")
    parts: list[CompletedPart] | None = Field(default=None, max_length=MAX_PARTS)


class AssetView(BaseModel):
    """`GET /v1/assets/{id}`: the upload's status, and once READY what was stored."""

    id: str
    status: str
    reason: str | None
    kind: str
    filename: str
    declared_size: int
    content_type: str | None = None
    size: int | None = None
    sha256: str | None = None
    width: int | None = None
    height: int | None = None
    duration_s: float | None = None
    created_at: datetime


class SweepReport(BaseModel):
    expired: int = 0  # uploads never completed in time: REJECTED, bytes and parts removed
    aborted_multiparts: int = 0  # open multipart uploads past the TTL (with or without a row)
    reappeared: int = 0  # quarantine objects of ended uploads (put again through their URL): removed


def quarantine_prefix(tenant_id: str) -> str:
    return f"tenants/{tenant_id}/uploads/quarantine/"


def quarantine_key(tenant_id: str, upload_id: str) -> str:
    return quarantine_prefix(tenant_id) + upload_id


def media_type(content_type: str) -> str:
    """`text/csv` of `Text/CSV; charset=utf-8`."""
    return content_type.split(";")[0].strip().lower()


def kind_of(content_type: str) -> str:
    kind = KIND_OF_TYPE.get(media_type(content_type))
    if kind is None:
        raise UploadRefused(415, "upload-type", f"content_type must be one of: {', '.join(KIND_OF_TYPE)}")
    return kind


def part_size_for(size: int) -> int:
    return max(MIN_PART, math.ceil(size / MAX_PARTS))


class Uploads:
    """The upload service; the gateway's routes call it from a worker thread (blocking I/O)."""

    def __init__(self, db: Database, storage: ObjectStorage, *, url_ttl: timedelta, complete_ttl: timedelta,
                 media_limits: MediaLimits | None = None, max_pixels: int = 3840 * 2160,
                 max_duration_s: float = 120.0):
        self.db = db
        self.storage = storage
        self.url_ttl = url_ttl
        self.complete_ttl = complete_ttl
        self.media_limits = media_limits or MediaLimits()
        self.max_pixels = max_pixels
        self.max_duration_s = max_duration_s

    # create ----------------------------------------------------------------------------------
    def create(self, tenant_id: str, request: UploadRequest, now: datetime | None = None) -> UploadTicket:
        kind = kind_of(request.content_type)
        if request.size > MAX_BYTES[kind]:
            raise UploadRefused(413, "upload-too-large",
                                f"{kind.lower()} uploads are limited to {MAX_BYTES[kind]} bytes")
        with self.db.transaction() as session:  # refused early, before any call to S3
            _check_quota(rows.pending_count(session, tenant_id))
        now = now or datetime.now(UTC)
        upload_id = "ast_" + secrets.token_hex(16)
        key = quarantine_key(tenant_id, upload_id)
        content_type = media_type(request.content_type)
        ticket = UploadTicket(id=upload_id, status=rows.PENDING, object_key=key, upload_url=None,
                              headers={"Content-Type": content_type}, urls_expire_at=now + self.url_ttl,
                              complete_by=now + self.complete_ttl)
        upload_id_s3 = None
        if request.size > MULTIPART_FROM:
            # S3 first: a crash before the row is written leaves an open multipart upload that the
            # sweep aborts after the TTL (it looks at every one under the quarantine prefix).
            upload_id_s3 = self.storage.start_multipart(key, content_type)
            ticket.part_size = part_size_for(request.size)
            count = math.ceil(request.size / ticket.part_size)
            sizes = [min(ticket.part_size, request.size - (n - 1) * ticket.part_size) for n in range(1, count + 1)]
            ticket.parts = [
                PartTicket(part_number=n, size=size,
                           url=self.storage.presigned_part_url(key, upload_id_s3, n, self.url_ttl, size=size))
                for n, size in enumerate(sizes, 1)
            ]
        else:
            ticket.upload_url, bound = self.storage.presigned_put(key, self.url_ttl, size=request.size,
                                                                  sha256=request.sha256.lower())
            ticket.headers.update(bound)
        try:
            with self.db.transaction() as session:  # counted and inserted under the tenant's quota lock
                _check_quota(rows.pending_count(session, tenant_id, lock=True))
                session.add(Upload(
                    id=upload_id, tenant_id=tenant_id, kind=kind, filename=request.filename,
                    declared_size=request.size, declared_type=content_type, declared_sha256=request.sha256.lower(),
                    status=rows.PENDING, quarantine_key=key, multipart_upload_id=upload_id_s3,
                    part_size=ticket.part_size, expires_at=ticket.complete_by,
                ))
        except UploadRefused:
            if upload_id_s3:
                self.storage.abort_multipart(key, upload_id_s3)
            raise
        return ticket

    # complete --------------------------------------------------------------------------------
    def complete(self, tenant_id: str, upload_id: str, request: CompleteRequest | None = None) -> AssetView:
        """Check the uploaded object and validate it: the upload ends READY or REJECTED. Repeatable:
        an ended upload answers as it is; while another call validates it, VALIDATING (one whose
        validator died is claimed again after VALIDATION_LEASE_S)."""
        with self.db.transaction() as session:
            upload = rows.find_upload(session, tenant_id, upload_id)
            if upload is None:
                raise LookupError(upload_id)
            session.expunge(upload)
        if upload.status in (rows.READY, rows.REJECTED):
            return self.view(tenant_id, upload_id)
        with self.db.transaction() as session:
            claimed = rows.claim_validation(session, upload.id, VALIDATION_LEASE_S)
        if not claimed:  # another complete validates it now (or just ended it): its status answers
            return self.view(tenant_id, upload_id)
        try:
            return self._complete(upload, request)
        except BaseException as exc:
            with self.db.transaction() as session:  # not ended: a later complete may claim it at once
                rows.move(session, upload.id, rows.PENDING, allowed_from=(rows.VALIDATING,))
            if isinstance(exc, _Missing) or (isinstance(exc, S3Error) and exc.code in _GONE):
                raise UploadRefused(409, "upload-missing", "nothing was uploaded to this upload's URL yet") from exc
            raise

    def _complete(self, upload: Upload, request: CompleteRequest | None) -> AssetView:
        if upload.multipart_upload_id:
            self._finish_multipart(upload, request.parts if request else None)
        stored = self.storage.stat(upload.quarantine_key)
        if stored is None:
            raise _Missing(upload.quarantine_key)
        if stored.size != upload.declared_size:
            self._reject(upload, f"size mismatch: {stored.size} bytes received, {upload.declared_size} declared")
            raise UploadRefused(422, "upload-size-mismatch",
                                f"{stored.size} bytes were uploaded but {upload.declared_size} were declared")
        with tempfile.TemporaryDirectory(prefix="upload-") as tmp:
            path = self.storage.get_to_file(upload.quarantine_key, Path(tmp) / "object")
            sha, _ = file_sha256(path)
            if sha != upload.declared_sha256:
                self._reject(upload, f"checksum mismatch: sha256 {sha} received, {upload.declared_sha256} declared")
                raise UploadRefused(422, "upload-checksum-mismatch",
                                    "the uploaded bytes do not have the declared sha256")
            try:
                asset_fields = self._validated(upload, path, sha)
            except (AssetRejected, ImageRejected, MediaLimitExceeded) as exc:  # our own words
                self._reject(upload, str(exc))
                return self.view(upload.tenant_id, upload.id)
            except MediaError as exc:  # ffprobe's output and a path on this server: logged, not told
                log.info("upload %s: the video could not be probed: %s", upload.id, exc)
                self._reject(upload, "not a readable video: its streams could not be read")
                return self.view(upload.tenant_id, upload.id)
        with self.db.transaction() as session:
            asset = rows.record_upload_asset(session, upload, bucket=self.storage.bucket, **asset_fields)
            rows.move(session, upload.id, rows.READY, allowed_from=(rows.VALIDATING,), asset_id=asset.id)
        self.storage.remove(upload.quarantine_key)
        return self.view(upload.tenant_id, upload.id)

    def _finish_multipart(self, upload: Upload, claimed: list[CompletedPart] | None) -> None:
        """Every part must be there (and match the ETags the client got, when it sends them)."""
        parts = self.storage.uploaded_parts(upload.quarantine_key, upload.multipart_upload_id)
        if parts is None:
            return  # completed by an earlier call (or aborted: the object is then missing)
        expected = math.ceil(upload.declared_size / upload.part_size)
        if [p.number for p in parts] != list(range(1, expected + 1)):
            raise UploadRefused(409, "upload-incomplete",
                                f"{len(parts)} of {expected} parts received; send the missing ones, then complete")
        if claimed is not None and {(c.part_number, c.etag.strip('"')) for c in claimed} != {
                (p.number, p.etag) for p in parts}:
            raise UploadRefused(422, "upload-parts-mismatch", "the parts and ETags sent do not match those received")
        self.storage.complete_multipart(upload.quarantine_key, upload.multipart_upload_id, parts)

    def _reject(self, upload: Upload, reason: str) -> None:
        with self.db.transaction() as session:
            rows.move(session, upload.id, rows.REJECTED, allowed_from=rows.OPEN, reason=reason[:2000])
        if upload.multipart_upload_id:
            self.storage.abort_multipart(upload.quarantine_key, upload.multipart_upload_id)
        self.storage.remove(upload.quarantine_key)

    # validation ------------------------------------------------------------------------------
    def _validated(self, upload: Upload, path: Path, sha: str) -> dict:
        """Check the bytes for their kind and store them out of quarantine; the asset row's fields."""
        with path.open("rb") as handle:
            head = handle.read(64)
        if upload.kind == IMAGE:
            return self._image(upload, path)
        if upload.kind == VIDEO:
            if not (head[4:8] == b"ftyp" or head.startswith(b"\x1a\x45\xdf\xa3")):
                raise AssetRejected("not a video: the file is not MP4, QuickTime or WebM (by its first bytes)")
            info = probe(path, self.media_limits)
            if not info.video_codec:
                raise AssetRejected("not a video: no video stream")
            check_input_caps(info, max_pixels=self.max_pixels, max_duration_s=self.max_duration_s)
            return self._promoted(upload, path, sha, "INPUT_VIDEO", duration_s=info.duration_s, width=info.width,
                                  height=info.height, codec=info.video_codec)
        _check_text(path)
        return self._promoted(upload, path, sha, "CATALOG_UPLOAD")

    def _image(self, upload: Upload, path: Path) -> dict:
        """The catalog's image checks; the re-encoded bytes go where the catalog keeps images (by sha256)."""
        data = path.read_bytes()
        if image_format(data) is None:
            raise AssetRejected("not an image: the file is not a JPEG, PNG or WebP (by its first bytes)")
        clean, content_type = normalised_image(data)
        sha = hashlib.sha256(clean).hexdigest()
        key = self.storage.put_bytes(image_key(upload.tenant_id, sha, content_type), clean, content_type).key
        width, height = image_size(clean)
        return {"kind": "INPUT_IMAGE", "key": key, "size": len(clean), "sha256": sha, "mime": content_type,
                "width": width, "height": height}

    def _promoted(self, upload: Upload, path: Path, sha: str, asset_kind: str, **fields) -> dict:  # noqa: ANN003
        """Checked as they are: the checked local copy goes to a key of its sha256 (not a server-side
        copy of the quarantine key, which the upload URL may have written again since the check)
        and the suffix of its checked type."""
        suffix = SUFFIX_OF_TYPE[media_type(upload.declared_type)]
        key = f"tenants/{upload.tenant_id}/uploads/{asset_kind.lower()}/{sha}{suffix}"
        self.storage.promote_file(path, key, sha, upload.declared_type)
        return {"kind": asset_kind, "key": key, "size": upload.declared_size, "sha256": sha,
                "mime": upload.declared_type, **fields}

    # read and sweep --------------------------------------------------------------------------
    def view(self, tenant_id: str, upload_id: str) -> AssetView | None:
        with self.db.transaction() as session:
            upload = rows.find_upload(session, tenant_id, upload_id)
            if upload is None:
                return None
            asset = session.get(Asset, upload.asset_id) if upload.asset_id else None
            out = AssetView(id=upload.id, status=upload.status, reason=upload.reason, kind=upload.kind,
                            filename=upload.filename, declared_size=upload.declared_size,
                            created_at=upload.created_at)
            if asset is not None:
                out.content_type, out.size, out.sha256 = asset.mime, asset.size, asset.sha256
                out.width, out.height = asset.width, asset.height
                out.duration_s = float(asset.duration_s) if asset.duration_s is not None else None
            return out

    def sweep(self, multipart_ttl: timedelta | None = None, now: datetime | None = None) -> SweepReport:
        """Uploads not completed in time end REJECTED (their bytes and parts removed); open multipart
        uploads older than the TTL are aborted, whether or not a row names them (a crash between S3 and
        the row). Safe to run from several places at once: every step is repeatable."""
        now = now or datetime.now(UTC)
        ttl = multipart_ttl or self.complete_ttl
        report = SweepReport()
        with self.db.transaction() as session:
            expired = rows.expired_pending_uploads(session, now)
            session.expunge_all()
        for upload in expired:
            self._reject(upload, "expired: not completed in time")
            report.expired += 1
        for open_upload in self.storage.open_multiparts("tenants/"):
            if "/uploads/quarantine/" not in open_upload.key:
                continue
            if open_upload.initiated is None or open_upload.initiated < now - ttl:
                self.storage.abort_multipart(open_upload.key, open_upload.upload_id)
                report.aborted_multiparts += 1
        report.reappeared = self._remove_reappeared(now)
        return report

    def _remove_reappeared(self, now: datetime) -> int:
        """An upload URL works until it expires, also after complete: what it puts back into
        quarantine for an ended upload (or one without a row, once its URL could have expired) is
        removed. Looked for under the quarantine prefix of each tenant that made an upload recently
        enough for its URL to work, with a day's margin for sweeps that did not run."""
        removed = 0
        with self.db.transaction() as session:
            recent = rows.tenants_with_uploads_since(session, now - self.url_ttl - REAPPEARED_MARGIN)
        for tenant_id in recent:
            found = {o.key.rsplit("/", 1)[-1]: o for o in self.storage.list_objects(quarantine_prefix(tenant_id))}
            if not found:
                continue
            with self.db.transaction() as session:
                status = rows.statuses(session, tenant_id, list(found))
            for upload_id, listed in found.items():
                ended = status.get(upload_id) in (rows.READY, rows.REJECTED)
                orphan = upload_id not in status and (listed.last_modified is None
                                                      or listed.last_modified < now - self.url_ttl)
                if ended or orphan:
                    self.storage.remove(listed.key)
                    removed += 1
        return removed


def _check_quota(pending: int) -> None:
    if pending >= MAX_PENDING:
        raise UploadRefused(429, "upload-quota", f"at most {MAX_PENDING} uploads may await completion at once: "
                            "complete (or let expire) some first", retry_after_s=QUOTA_RETRY_S)


def _check_text(path: Path) -> None:
    """A catalog is text: no NUL byte and no known binary header in its first MiB (the importer
    reads it fully later, with its own checks)."""
    with path.open("rb") as handle:
        head = handle.read(TEXT_PROBE_BYTES)
    if head.startswith(_BINARY_MAGIC) or image_format(head) is not None or b"\x00" in head:
        raise AssetRejected("not a catalog: the file is binary, not CSV or TSV text")

