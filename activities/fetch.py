"""Copy a provider's output into our own storage before the provider's URL expires.

The URL is asked for afresh (outputs expire), and again, a bounded number of times, when it
answers 403/404/410 or its known expiry is too close (`FreshOutput`): a video already paid for
is not lost to a stale link. It is fetched through the SSRF-safe fetcher (https, the provider's
output domains, an MP4 body with an `ftyp` box, no transparent decoding), streamed to
a staging key while a local copy is probed, and only then promoted to the deterministic key
`tenants/{t}/tasks/{task}/raw/{attempt}.mp4`. A repeated run finds the asset row, or the
promoted object, and does not download again.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session
from temporalio import activity

from activities.errors import FETCH_REFUSED, OUTPUT_INVALID, OUTPUT_UNAVAILABLE, business_failure, classified
from activities.failpoints import failpoint
from activities.status_calls import StatusCalls
from activities.tasks import Applied, apply_moves, moved
from adapters.fetcher import MP4_BODY, BodyRejected, FetchFailed, FetchRefused, SafeFetcher, redact
from adapters.media.transcode import MediaError, MediaInfo, probe
from adapters.providers.base import OutputRef, VideoProvider
from adapters.storage import ObjectStorage, StoredObject, WriteConflict, file_sha256
from contracts.messages import AssetRef, FetchedAsset, JobRef
from contracts.provider import JobStatus
from contracts.task import TaskEvent
from schema import task_store
from schema.assets import find_asset, record_asset
from schema.db import Database
from schema.models import Asset, Task

VIDEO_MIME = "video/mp4"
EXPIRED_URL_STATUSES = frozenset({403, 404, 410})  # how stale signed URLs answer (S3, GCS, CDNs)

log = logging.getLogger(__name__)


def raw_key(tenant_id: str, task_id: str, attempt_no: int) -> str:
    return f"tenants/{tenant_id}/tasks/{task_id}/raw/{attempt_no}.mp4"


def asset_ref(asset: Asset) -> AssetRef:
    return AssetRef(asset_id=asset.id, kind=asset.kind, key=asset.key, sha256=asset.sha256, size=asset.size)


class FreshOutput:
    """A job's output URL, asked for again (a status call) when it is stale, at most `refreshes`
    times: when it answered 403/404/410, or when its known `expires_at` is within `margin_s`.
    `known` is the URL an earlier try of the step already got (its heartbeat): used without asking."""

    def __init__(
        self, provider: VideoProvider, job_id: str, *, refreshes: int, margin_s: float,
        now: Callable[[], datetime] = lambda: datetime.now(UTC), known: OutputRef | None = None,
        status_calls: StatusCalls | None = None,
    ) -> None:
        self._provider, self._job_id = provider, job_id
        self._status_calls = status_calls or StatusCalls(None)  # none: no polling budget
        self._budget, self._margin = refreshes, timedelta(seconds=margin_s)
        self._now = now
        self.refreshes = 0
        self.resumed = known is not None
        self.output = known or self._ask()

    def usable(self) -> OutputRef:
        """The URL to fetch now: asked again while it is about to expire and the budget lasts."""
        while self._expiring() and self.refreshes < self._budget:
            self._refresh(f"expires at {self.output.expires_at:%H:%M:%S}")
        return self.output

    def expired(self, exc: FetchFailed) -> bool:
        """After a failed fetch: True (with a fresh URL to try) when it looked like a stale link."""
        if exc.status not in EXPIRED_URL_STATUSES or self.refreshes >= self._budget:
            return False
        self._refresh(f"answered HTTP {exc.status}")
        return True

    def _expiring(self) -> bool:
        expires = self.output.expires_at
        return expires is not None and expires - self._now() <= self._margin

    def _refresh(self, why: str) -> None:
        self.refreshes += 1
        log.info("output of job %s %s (%s): asking the provider again (%d/%d)",
                 self._job_id, why, redact(self.output.url), self.refreshes, self._budget)
        self.output = self._ask()

    def _ask(self) -> OutputRef:
        state = self._status_calls.get_job(self._provider, self._job_id)
        if state.status is not JobStatus.SUCCEEDED or not state.outputs:
            raise business_failure(f"job {self._job_id} has no output ({state.raw_status})", OUTPUT_UNAVAILABLE)
        output = state.outputs[0]
        if output.expires_at is not None and output.expires_at.tzinfo is None:
            output = output.model_copy(update={"expires_at": output.expires_at.replace(tzinfo=UTC)})
        return output


class FetchActivities:
    def __init__(
        self, db: Database, storage: ObjectStorage, providers: dict[str, VideoProvider], fetcher: SafeFetcher,
        *, url_refreshes: int = 3, expiry_margin_s: float = 30.0, status_calls: StatusCalls | None = None,
    ):
        """`status_calls`: how the output URL is asked for (the providers' polling budgets)."""
        self.db = db
        self.status_calls = status_calls or StatusCalls(db)
        self.storage = storage
        self.providers = providers
        self.fetcher = fetcher
        self.url_refreshes = url_refreshes
        self.expiry_margin_s = expiry_margin_s

    @activity.defn(name="fetch_output")
    @classified
    def fetch_output(self, ref: JobRef) -> FetchedAsset:
        """The job's output in our storage; the moves the request carries (transition-in-work-v2: the
        task's output is persisted) are committed with its asset row, and never without it."""
        business_key = f"raw:{ref.task_id}:{ref.attempt_no}"
        with self.db.transaction() as session:
            found = find_asset(session, business_key)
            if found is not None:
                kept, done = asset_ref(found), _persisted(session, found, ref)
            else:
                task = session.get(Task, ref.task_id)
        if found is not None:
            return FetchedAsset(**kept.model_dump(), moved=moved(done))
        final_key = raw_key(task.tenant_id, task.id, ref.attempt_no)
        with tempfile.TemporaryDirectory(prefix="rq-fetch-") as tmp:
            local = Path(tmp) / "raw.mp4"
            stored = self.storage.stat(final_key)
            fetched: dict[str, Any] = {}
            if stored is not None and stored.sha256:  # promoted earlier, DB write lost: verify, then record
                self.storage.get_to_file(final_key, local)
            else:
                try:
                    stored, fetched = self._download(task, ref, final_key, local)
                except WriteConflict as conflict:  # write-once: the stored object stays the output
                    stored = self._keep_stored(task, ref, conflict, local)
            info = _probe_or_fail(local)
        failpoint("after_store_before_db")
        with self.db.transaction() as session:
            asset = record_asset(
                session, business_key=business_key, tenant_id=task.tenant_id, task_id=task.id, kind="RAW_OUTPUT",
                bucket=stored.bucket, key=stored.key, size=stored.size, sha256=stored.sha256, mime=VIDEO_MIME,
                duration_s=info.duration_s, width=info.width, height=info.height, codec=info.video_codec,
                meta={"attempt_no": ref.attempt_no, "job_id": ref.job_id, **fetched},
            )
            stored_ref, done = asset_ref(asset), _persisted(session, asset, ref)
        return FetchedAsset(**stored_ref.model_dump(), moved=moved(done))

    def _download(self, task: Task, ref: JobRef, final_key: str, local: Path) -> tuple[StoredObject, dict[str, Any]]:
        """Stream the output to a staging key (and `local`), then promote it; how (URL refreshes
        used, whether the URL came from an earlier try's heartbeat)."""
        provider = self.providers[task.provider]
        source = FreshOutput(provider, ref.job_id, refreshes=self.url_refreshes, margin_s=self.expiry_margin_s,
                             known=resumed_output(activity.info().heartbeat_details), status_calls=self.status_calls)
        staging = f"tenants/{task.tenant_id}/tasks/{task.id}/staging/{ref.attempt_no}-{activity.info().attempt}.mp4"
        domains = provider.capabilities.output_domains
        while True:
            try:
                url = source.usable().url
                with self.fetcher.stream(url, domains=domains, expect=MP4_BODY) as (_meta, chunks), \
                        open(local, "wb") as copy:
                    staged = self.storage.put_stream(staging, _tee(chunks, copy, source.output), VIDEO_MIME)
                break
            except FetchRefused as exc:
                raise business_failure(f"output URL refused: {exc}", FETCH_REFUSED) from exc
            except BodyRejected as exc:
                raise business_failure(f"output is not an acceptable video: {exc}", OUTPUT_INVALID) from exc
            except FetchFailed as exc:
                if source.expired(exc):
                    activity.heartbeat(_progress(source.output))
                    continue
                if not exc.retryable:
                    raise business_failure(f"output download failed: {exc}", OUTPUT_UNAVAILABLE) from exc
                raise
        try:
            _probe_or_fail(local)
        except Exception:
            self.storage.remove(staging)
            raise
        how = {"url_refreshes": source.refreshes, "url_from_heartbeat": source.resumed}
        return self.storage.promote(staging, final_key, staged.sha256, VIDEO_MIME), how

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


def _persisted(session: Session, asset: Asset, ref: JobRef) -> Applied:
    """The request's moves, with the output's key and sha256, in the transaction that holds its asset row."""
    return apply_moves(session, [m.with_facts(raw_key=asset.key, sha256=asset.sha256) for m in ref.moves])


def _tee(chunks, copy, output: OutputRef):  # noqa: ANN001, ANN202 - iterator of bytes, binary file
    done = 0
    for n, chunk in enumerate(chunks):
        copy.write(chunk)
        done += len(chunk)
        activity.heartbeat(_progress(output, done))
        if n == 0:
            failpoint("mid_download")
        yield chunk


def _progress(output: OutputRef, done: int = 0) -> dict:
    """A fetch's heartbeat: the URL it streams from (a retry on another worker, after a deploy or a
    crash, starts from it without asking the provider again) and the bytes so far."""
    return {"output": output.model_dump(mode="json"), "bytes": done}


def resumed_output(details: Sequence[Any]) -> OutputRef | None:
    """The output URL in the last heartbeat of an earlier try of this step, if it left one."""
    if not details or not isinstance(details[-1], dict):
        return None
    try:
        return OutputRef.model_validate(details[-1].get("output"))
    except ValidationError:
        return None


def _probe_or_fail(path: Path) -> MediaInfo:
    try:
        info = probe(path)
    except MediaError as exc:
        raise business_failure(f"provider output is not a readable video: {exc}", OUTPUT_INVALID) from exc
    if not info.video_codec or not info.duration_s:
        raise business_failure("provider output has no video stream", OUTPUT_INVALID)
    return info
