"""Object storage behind one small interface (S3 API: SeaweedFS embedded, MinIO or S3 in production).

Keys are always made by the server side (deterministic, from tenant/task/attempt), never by a
client. The sha256 of every object we write is kept as object metadata so a repeated write can
be checked against what is already there instead of blindly overwriting it. Final keys (what
`promote` writes) are write-once: other bytes for an existing final key are set aside next to it
and reported as a `WriteConflict`, never written over the object rows may already refer to.
"""

from __future__ import annotations

import base64
import hashlib
import io
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

import urllib3
from minio import Minio
from minio.commonconfig import CopySource
from minio.datatypes import Part
from minio.error import S3Error
from pydantic import BaseModel

from adapters.hashing import BackgroundSha256
from adapters.presign import presign

SHA_META = "sha256"
PART_SIZE = 8 * 1024 * 1024
# S3 error codes that say the credentials are wrong: waiting will not change them.
REFUSED = ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch")
_T = TypeVar("_T")


class StoredObject(BaseModel):
    bucket: str
    key: str
    size: int
    sha256: str | None
    content_type: str | None = None


class ListedObject(BaseModel):
    key: str
    size: int
    last_modified: datetime | None = None


class UploadedPart(BaseModel):
    number: int
    etag: str
    size: int


class OpenMultipart(BaseModel):
    key: str
    upload_id: str
    initiated: datetime | None


class WriteConflict(Exception):
    """A final key already holds different bytes: they stay; the new bytes were kept at `kept_at`."""

    def __init__(self, key: str, existing_sha256: str | None, new_sha256: str, kept_at: str):
        super().__init__(f"{key} already holds sha256 {existing_sha256}; new bytes {new_sha256} kept at {kept_at}")
        self.key = key
        self.existing_sha256 = existing_sha256
        self.new_sha256 = new_sha256
        self.kept_at = kept_at


def public_host(endpoint: str, secure: bool) -> tuple[str, bool]:
    """(host:port, https?) of REELQUEUE_S3_PUBLIC_ENDPOINT: a URL, or host:port with the internal scheme."""
    if "://" not in endpoint:
        return endpoint.rstrip("/"), secure
    parts = urlsplit(endpoint)
    return parts.netloc, parts.scheme == "https"


def conflict_key(final_key: str, sha256: str) -> str:
    """Where the bytes that lost a write-once conflict are kept (deterministic: a retry finds them)."""
    return f"{final_key}.conflict-{sha256[:16]}"


class ObjectStorage:
    def __init__(
        self,
        endpoint: str,
        access_key: str,
        secret_key: str,
        bucket: str,
        *,
        secure: bool = False,
        region: str = "us-east-1",
        public_endpoint: str = "",
    ):
        self.bucket = bucket
        self.client = Minio(endpoint, access_key=access_key, secret_key=secret_key, secure=secure, region=region)
        # Presigned URLs for clients outside our network are signed for the host they reach S3 by
        # (signing is offline: the region is known, so no request goes to that host).
        self.signer = self.client
        signed_host, signed_secure = endpoint, secure
        if public_endpoint:
            signed_host, signed_secure = public_host(public_endpoint, secure)
            self.signer = Minio(signed_host, access_key=access_key, secret_key=secret_key, secure=signed_secure,
                                region=region)
        self._signing = {"scheme": "https" if signed_secure else "http", "host": signed_host,
                         "access_key": access_key, "secret_key": secret_key, "region": region}

    @classmethod
    def from_settings(cls, settings) -> ObjectStorage:  # noqa: ANN001 - config.Settings
        return cls(
            settings.s3_endpoint,
            settings.s3_access_key,
            settings.s3_secret_key,
            settings.s3_bucket,
            secure=settings.s3_secure,
            region=settings.s3_region,
            public_endpoint=settings.s3_public_endpoint,
        )

    def ensure_bucket(self, *, wait_s: float = 0.0) -> bool:
        """Make the bucket unless it exists; True when this call made it. Safe to repeat and to race.

        `wait_s`: keep trying that long while the server does not answer yet (a one-shot job started
        together with S3, or a filer a moment behind its S3 port); refused credentials end it at once."""
        def make() -> bool:
            try:
                if self.client.bucket_exists(self.bucket):
                    return False
                self.client.make_bucket(self.bucket)
                return True
            except S3Error as exc:
                if exc.code in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):  # another process first
                    return False
                raise

        return self._answered(make, wait_s)

    def bucket_exists(self, *, wait_s: float = 0.0) -> bool:
        """Whether the bucket exists, asked with these keys (HeadBucket), waiting as `ensure_bucket` does.
        Creates and changes nothing: the check for a deployment whose bucket (and its CORS rule) is set
        up once by its operator, so that the app's keys need no CreateBucket or PutBucketCORS right."""
        return self._answered(lambda: self.client.bucket_exists(self.bucket), wait_s)

    @staticmethod
    def _answered(call: Callable[[], _T], wait_s: float) -> _T:
        """`call`'s answer, retried for `wait_s` while S3 does not answer; refused keys raise at once."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                return call()
            except S3Error as exc:
                if exc.code in REFUSED or time.monotonic() > deadline:
                    raise
            except (OSError, urllib3.exceptions.HTTPError):  # not listening yet, or reset while it starts
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.3)

    def stat(self, key: str) -> StoredObject | None:
        try:
            st = self.client.stat_object(self.bucket, key)
        except S3Error as exc:
            if exc.code in ("NoSuchKey", "NoSuchObject", "NotFound", "ResourceNotFound"):
                return None
            raise
        meta = {k.lower(): v for k, v in (st.metadata or {}).items()}
        sha = meta.get(f"x-amz-meta-{SHA_META}")
        return StoredObject(bucket=self.bucket, key=key, size=st.size or 0, sha256=sha, content_type=st.content_type)

    def put_file(self, key: str, path: Path, content_type: str = "application/octet-stream") -> StoredObject:
        """Upload a local file; if the same bytes are already at `key`, leave them alone."""
        sha, size = file_sha256(path)
        existing = self.stat(key)
        if existing and existing.sha256 == sha and existing.size == size:
            return existing
        self.client.fput_object(self.bucket, key, str(path), content_type=content_type, metadata={SHA_META: sha})
        return StoredObject(bucket=self.bucket, key=key, size=size, sha256=sha, content_type=content_type)

    def put_bytes(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> StoredObject:
        sha = hashlib.sha256(data).hexdigest()
        existing = self.stat(key)
        if existing and existing.sha256 == sha:
            return existing
        self.client.put_object(
            self.bucket, key, io.BytesIO(data), len(data), content_type=content_type, metadata={SHA_META: sha}
        )
        return StoredObject(bucket=self.bucket, key=key, size=len(data), sha256=sha, content_type=content_type)

    def put_stream(self, key: str, chunks: Iterable[bytes], content_type: str) -> StoredObject:
        """Stream chunks of unknown total length into `key` (multipart), hashing as they pass."""
        with _HashingReader(iter(chunks)) as reader:
            self.client.put_object(self.bucket, key, reader, length=-1, part_size=PART_SIZE,
                                   content_type=content_type)
        return StoredObject(
            bucket=self.bucket, key=key, size=reader.size, sha256=reader.sha.hexdigest(), content_type=content_type
        )

    def promote(self, staging_key: str, final_key: str, sha256: str, content_type: str) -> StoredObject:
        """Copy a verified staging object to its deterministic key, then drop the staging copy. Only
        for a staging key nobody else can write to (a worker's own): the copy is of what is there now.

        Write-once: if the final key holds other bytes (or bytes of unknown checksum), they stay;
        the staging bytes are copied to `conflict_key(...)` and WriteConflict says so.
        """
        conflict = self._write_once(final_key, sha256, lambda key: self._copy(staging_key, key, sha256, content_type))
        self.remove(staging_key)
        return self._promoted(final_key, conflict)

    def promote_file(self, path: Path, final_key: str, sha256: str, content_type: str) -> StoredObject:
        """Store the local file whose bytes were verified (`sha256`) at its deterministic key, write-once
        as `promote`: what a client could still change (a quarantine key behind a presigned URL) is
        never copied server-side after its check."""
        conflict = self._write_once(final_key, sha256, lambda key: self.client.fput_object(
            self.bucket, key, str(path), content_type=content_type, metadata={SHA_META: sha256}))
        return self._promoted(final_key, conflict)

    def _write_once(self, final_key: str, sha256: str, write: Callable[[str], object]) -> WriteConflict | None:
        existing = self.stat(final_key)
        if existing is not None and existing.sha256 != sha256:
            kept = conflict_key(final_key, sha256)
            write(kept)
            return WriteConflict(final_key, existing.sha256, sha256, kept)
        if existing is None:
            write(final_key)
        return None

    def _promoted(self, final_key: str, conflict: WriteConflict | None) -> StoredObject:
        if conflict is not None:
            raise conflict
        promoted = self.stat(final_key)
        assert promoted is not None
        return promoted

    def _copy(self, source_key: str, key: str, sha256: str, content_type: str) -> None:
        self.client.copy_object(
            self.bucket,
            key,
            CopySource(self.bucket, source_key),
            metadata={SHA_META: sha256, "Content-Type": content_type},
            metadata_directive="REPLACE",
        )

    def get_to_file(self, key: str, path: Path) -> Path:
        self.client.fget_object(self.bucket, key, str(path))
        return path

    def read_bytes(self, key: str) -> bytes:
        response = self.client.get_object(self.bucket, key)
        try:
            return response.read()
        finally:
            response.close()
            response.release_conn()

    def iter_object(
        self, key: str, chunk_size: int = 1024 * 1024, *, offset: int = 0, length: int | None = None
    ) -> Iterator[bytes]:
        """The object's bytes from `offset` (`length` of them, default all), streamed in chunks."""
        response = self.client.get_object(self.bucket, key, offset=offset, length=length or 0)
        try:
            yield from response.stream(chunk_size)
        finally:
            response.close()
            response.release_conn()

    def remove(self, key: str) -> None:
        try:
            self.client.remove_object(self.bucket, key)
        except S3Error as exc:
            if exc.code not in ("NoSuchKey", "NoSuchObject"):
                raise

    def list_objects(self, prefix: str = "") -> Iterator[ListedObject]:
        """Every object under `prefix`, streamed page by page (the bucket may hold millions)."""
        for obj in self.client.list_objects(self.bucket, prefix=prefix, recursive=True):
            if not obj.is_dir:
                yield ListedObject(key=obj.object_name, size=obj.size or 0, last_modified=obj.last_modified)

    def presigned_url(self, key: str, expires: timedelta = timedelta(hours=12), *, internal: bool = False) -> str:
        """A GET link on the public endpoint; `internal`: on the endpoint our own services use (the
        emulator, which runs beside us where the public address may not resolve)."""
        return (self.client if internal else self.signer).presigned_get_object(self.bucket, key, expires=expires)

    # Direct uploads by clients (control/uploads.py): the server picks the key, a signed URL allows
    # one method on that key for a short time, multipart for large files; on the public endpoint.
    def presigned_put(self, key: str, expires: timedelta, *, size: int, sha256: str) -> tuple[str, dict[str, str]]:
        """A PUT URL for `key` that takes only `size` bytes whose sha256 (hex) is `sha256`, and the
        headers the client must send with it: Content-Length and x-amz-checksum-sha256 are signed, and
        S3 checks both against the body (another size: 403; other bytes: 400 BadDigest)."""
        checksum = base64.b64encode(bytes.fromhex(sha256)).decode()
        return self._presigned_put(key, expires, {"Content-Length": str(size), "x-amz-checksum-sha256": checksum}), {
            "x-amz-checksum-sha256": checksum}

    @property
    def upload_origin(self) -> str:
        """`scheme://host[:port]` that upload URLs name (the public endpoint when one is set)."""
        return f"{self._signing['scheme']}://{self._signing['host']}".lower()

    def _presigned_put(self, key: str, expires: timedelta, headers: dict[str, str],
                       query: dict[str, str] | None = None) -> str:
        return presign(method="PUT", path=f"/{self.bucket}/{key}", now=datetime.now(UTC),
                       expires_s=int(expires.total_seconds()), headers=headers, query=query, **self._signing)

    def start_multipart(self, key: str, content_type: str) -> str:
        """A new multipart upload at `key`; its upload id."""
        return self.client._create_multipart_upload(self.bucket, key, {"Content-Type": content_type})

    def presigned_part_url(self, key: str, upload_id: str, number: int, expires: timedelta, *, size: int) -> str:
        """A PUT URL for one part of a multipart upload that takes only `size` bytes (signed
        Content-Length); only the whole file's sha256 is known, checked once the parts are joined."""
        return self._presigned_put(key, expires, {"Content-Length": str(size)},
                                   {"partNumber": str(number), "uploadId": upload_id})

    def uploaded_parts(self, key: str, upload_id: str) -> list[UploadedPart] | None:
        """The parts received so far, by number; None when no such upload is open (completed or aborted)."""
        parts: list[UploadedPart] = []
        marker: str | None = None
        while True:
            try:
                page = self.client._list_parts(self.bucket, key, upload_id, part_number_marker=marker)
            except S3Error as exc:
                if exc.code == "NoSuchUpload":
                    return None
                raise
            parts += [UploadedPart(number=p.part_number, etag=p.etag.strip('"'), size=p.size or 0)
                      for p in page.parts]
            if not page.is_truncated:
                return sorted(parts, key=lambda p: p.number)
            marker = page.next_part_number_marker

    def complete_multipart(self, key: str, upload_id: str, parts: list[UploadedPart]) -> None:
        self.client._complete_multipart_upload(self.bucket, key, upload_id,
                                               [Part(p.number, p.etag) for p in parts])

    def abort_multipart(self, key: str, upload_id: str) -> None:
        try:
            self.client._abort_multipart_upload(self.bucket, key, upload_id)
        except S3Error as exc:
            if exc.code != "NoSuchUpload":
                raise

    def open_multiparts(self, prefix: str) -> Iterator[OpenMultipart]:
        """Every multipart upload under `prefix` that was neither completed nor aborted."""
        key_marker = upload_marker = None
        while True:
            page = self.client._list_multipart_uploads(self.bucket, prefix=prefix, key_marker=key_marker,
                                                       upload_id_marker=upload_marker)
            for u in page.uploads:
                if u.upload_id:
                    yield OpenMultipart(key=u.object_name, upload_id=u.upload_id, initiated=u.initiated_time)
            if not page.is_truncated:
                return
            key_marker, upload_marker = page.next_key_marker, page.next_upload_id_marker


def file_sha256(path: Path) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1024 * 1024), b""):
            h.update(block)
            size += len(block)
    return h.hexdigest(), size


class _HashingReader(io.RawIOBase):
    """A file-like view over an iterator of chunks that hashes and counts what it hands out.

    The hash runs on its own thread while the next part is gathered and uploaded
    (adapters/hashing.py); a part is gathered in a bytearray (appending to `bytes` copied the
    whole part buffered so far for every chunk added)."""

    def __init__(self, chunks: Iterator[bytes]):
        self._chunks = chunks
        self._buffer = bytearray()
        self.sha = BackgroundSha256()
        self.size = 0

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        while n < 0 or len(self._buffer) < n:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self._buffer += chunk
        cut = len(self._buffer) if n < 0 else min(n, len(self._buffer))
        with memoryview(self._buffer) as view, view[:cut] as part:
            out = bytes(part)
        del self._buffer[:cut]
        self.sha.update(out)
        self.size += len(out)
        return out

    def close(self) -> None:
        self.sha.close()
        super().close()
