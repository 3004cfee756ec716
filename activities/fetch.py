"""Copy a provider's output into our own storage before the provider's URL expires.

The URL is asked for afresh (outputs expire), fetched through the SSRF-safe fetcher, streamed to
a staging key while a local copy is probed, and only then promoted to the deterministic key
`tenants/{t}/tasks/{task}/raw/{attempt}.mp4`. A repeated run finds the asset row, or the
promoted object, and does not download again.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from temporalio import activity

from activities.errors import FETCH_REFUSED, OUTPUT_INVALID, OUTPUT_UNAVAILABLE, business_failure, classified
from activities.failpoints import failpoint
from adapters.fetcher import FetchFailed, FetchRefused, SafeFetcher
from adapters.media.transcode import MediaError, MediaInfo, probe
from adapters.providers.base import JobStatus, VideoProvider
from adapters.storage import ObjectStorage, StoredObject, WriteConflict, file_sha256
from schema import task_store
from schema.assets import find_asset, record_asset
from schema.contracts import AssetRef, JobRef
from schema.db import Database
from schema.models import Asset, Task
from schema.state_machine import TaskEvent

VIDEO_MIME = "video/mp4"


def raw_key(tenant_id: str, task_id: str, attempt_no: int) -> str:
    return f"tenants/{tenant_id}/tasks/{task_id}/raw/{attempt_no}.mp4"


def asset_ref(asset: Asset) -> AssetRef:
    return AssetRef(asset_id=asset.id, kind=asset.kind, key=asset.key, sha256=asset.sha256, size=asset.size)


class FetchActivities:
    def __init__(
        self, db: Database, storage: ObjectStorage, providers: dict[str, VideoProvider], fetcher: SafeFetcher
    ):
        self.db = db
        self.storage = storage
        self.providers = providers
        self.fetcher = fetcher

    @activity.defn(name="fetch_output")
    @classified
    def fetch_output(self, ref: JobRef) -> AssetRef:
        business_key = f"raw:{ref.task_id}:{ref.attempt_no}"
        with self.db.transaction() as session:
            done = find_asset(session, business_key)
            if done is not None:
                return asset_ref(done)
            task = session.get(Task, ref.task_id)
        final_key = raw_key(task.tenant_id, task.id, ref.attempt_no)
        with tempfile.TemporaryDirectory(prefix="rq-fetch-") as tmp:
            local = Path(tmp) / "raw.mp4"
            stored = self.storage.stat(final_key)
            if stored is not None and stored.sha256:  # promoted earlier, DB write lost: verify, then record
                self.storage.get_to_file(final_key, local)
            else:
                try:
                    stored = self._download(task, ref, final_key, local)
                except WriteConflict as conflict:  # write-once: the stored object stays the output
                    stored = self._keep_stored(task, ref, conflict, local)
            info = _probe_or_fail(local)
        failpoint("after_store_before_db")
        with self.db.transaction() as session:
            asset = record_asset(
                session, business_key=business_key, tenant_id=task.tenant_id, task_id=task.id, kind="RAW_OUTPUT",
                bucket=stored.bucket, key=stored.key, size=stored.size, sha256=stored.sha256, mime=VIDEO_MIME,
                duration_s=info.duration_s, width=info.width, height=info.height, codec=info.video_codec,
                meta={"attempt_no": ref.attempt_no, "job_id": ref.job_id},
            )
            return asset_ref(asset)

    def _download(self, task: Task, ref: JobRef, final_key: str, local: Path) -> StoredObject:
        state = self.providers[task.provider].get_job(ref.job_id)  # fresh, unexpired output URLs
        if state.status is not JobStatus.SUCCEEDED or not state.outputs:
            raise business_failure(f"job {ref.job_id} has no output ({state.raw_status})", OUTPUT_UNAVAILABLE)
        staging = f"tenants/{task.tenant_id}/tasks/{task.id}/staging/{ref.attempt_no}-{activity.info().attempt}.mp4"
        try:
            with self.fetcher.stream(state.outputs[0].url) as (_meta, chunks), open(local, "wb") as copy:
                staged = self.storage.put_stream(staging, _tee(chunks, copy), VIDEO_MIME)
        except FetchRefused as exc:
            raise business_failure(f"output URL refused: {exc}", FETCH_REFUSED) from exc
        except FetchFailed as exc:
            if not exc.retryable:
                raise business_failure(f"output download failed: {exc}", OUTPUT_UNAVAILABLE) from exc
            raise
        try:
            _probe_or_fail(local)
        except Exception:
            self.storage.remove(staging)
            raise
        return self.storage.promote(staging, final_key, staged.sha256, VIDEO_MIME)

    def _keep_stored(self, task: Task, ref: JobRef, conflict: WriteConflict, local: Path) -> StoredObject:
        """Record the conflict as a state event (audit only), then verify and use what is stored."""
        self.storage.get_to_file(conflict.key, local)
        sha, size = file_sha256(local)
        with self.db.transaction() as session:
            task_store.transition(
                session, task.id, TaskEvent.STORAGE_CONFLICT, source="storage",
                source_event_id=f"conflict:{conflict.key}:{conflict.new_sha256}", attempt_no=ref.attempt_no,
                payload={"key": conflict.key, "stored_sha256": sha, "stored_sha256_metadata": conflict.existing_sha256,
                         "new_sha256": conflict.new_sha256, "new_bytes_at": conflict.kept_at},
            )
        activity.logger.warning("write-once conflict on %s: kept the stored object", conflict.key)
        return StoredObject(bucket=self.storage.bucket, key=conflict.key, size=size, sha256=sha,
                            content_type=VIDEO_MIME)


def _tee(chunks, copy):  # noqa: ANN001, ANN202 - iterator of bytes, binary file
    for n, chunk in enumerate(chunks):
        copy.write(chunk)
        if n == 0:
            failpoint("mid_download")
        activity.heartbeat()
        yield chunk


def _probe_or_fail(path: Path) -> MediaInfo:
    try:
        info = probe(path)
    except MediaError as exc:
        raise business_failure(f"provider output is not a readable video: {exc}", OUTPUT_INVALID) from exc
    if not info.video_codec or not info.duration_s:
        raise business_failure("provider output has no video stream", OUTPUT_INVALID)
    return info
