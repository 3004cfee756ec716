"""Make the playable renditions of a stored raw output: proxy MP4, HLS, thumbnail.

Keys and business keys come from the raw asset + profile + pipeline version, so a repeated run
(worker died mid-transcode) rewrites the same objects and finds the same rows.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from temporalio import activity

from activities.errors import OUTPUT_INVALID, business_failure, classified
from activities.failpoints import failpoint
from activities.fetch import asset_ref
from adapters.media.transcode import MediaError, make_hls, make_proxy, make_thumbnail, probe
from adapters.storage import ObjectStorage
from schema.assets import find_asset, record_asset
from schema.contracts import AssetRef, TranscodeInput, TranscodeResult
from schema.db import Database
from schema.models import Asset, Task

PIPELINE_VERSION = "v1"
PROFILES = ("proxy", "hls", "thumbnail")


def rendition_prefix(task: Task, profile: str) -> str:
    return f"tenants/{task.tenant_id}/tasks/{task.id}/{profile}/{PIPELINE_VERSION}"


class MediaActivities:
    def __init__(self, db: Database, storage: ObjectStorage):
        self.db = db
        self.storage = storage

    @activity.defn(name="transcode")
    @classified
    def transcode(self, req: TranscodeInput) -> TranscodeResult:
        keys = {p: f"{req.raw_asset_id}:{p}:{PIPELINE_VERSION}" for p in PROFILES}
        with self.db.transaction() as session:
            task = session.get(Task, req.task_id)
            raw = session.get(Asset, req.raw_asset_id)
            done = {p: find_asset(session, k) for p, k in keys.items()}
        if all(done.values()):
            return TranscodeResult(**{p: asset_ref(a) for p, a in done.items()})
        refs: dict[str, AssetRef] = {}
        with tempfile.TemporaryDirectory(prefix="rq-media-") as tmp:
            work = Path(tmp)
            src = self.storage.get_to_file(raw.key, work / "raw.mp4")
            activity.heartbeat("proxy")
            proxy_path = work / "main.mp4"
            try:
                info = make_proxy(src, proxy_path, task.aspect_ratio)
            except MediaError as exc:  # the same bytes will fail the same way: do not retry
                raise business_failure(f"raw output cannot be transcoded: {exc}", OUTPUT_INVALID) from exc
            proxy = self.storage.put_file(f"{rendition_prefix(task, 'proxy')}/main.mp4", proxy_path, "video/mp4")
            activity.heartbeat("hls")
            hls = make_hls(proxy_path, work / "hls")
            hls_prefix = rendition_prefix(task, "hls")
            segments = [
                self.storage.put_file(f"{hls_prefix}/{seg.name}", seg, "video/mp2t").key for seg in hls.segments
            ]
            playlist = self.storage.put_file(f"{hls_prefix}/{hls.playlist.name}", hls.playlist,
                                             "application/vnd.apple.mpegurl")
            activity.heartbeat("thumbnail")
            thumb_path = make_thumbnail(proxy_path, work / "thumb.jpg")
            thumb = self.storage.put_file(f"{rendition_prefix(task, 'thumbnail')}/thumb.jpg", thumb_path,
                                          "image/jpeg")
            thumb_info = probe(thumb_path)
            failpoint("after_transcode_before_db")
            with self.db.transaction() as session:
                common = {"tenant_id": task.tenant_id, "task_id": task.id, "pipeline_version": PIPELINE_VERSION}
                rows = {
                    "proxy": record_asset(
                        session, business_key=keys["proxy"], kind="PROXY", bucket=proxy.bucket, key=proxy.key,
                        size=proxy.size, sha256=proxy.sha256, mime="video/mp4", duration_s=info.duration_s,
                        width=info.width, height=info.height, codec=info.video_codec,
                        meta={"audio_codec": info.audio_codec}, **common,
                    ),
                    "hls": record_asset(
                        session, business_key=keys["hls"], kind="HLS", bucket=playlist.bucket, key=playlist.key,
                        size=playlist.size, sha256=playlist.sha256, mime="application/vnd.apple.mpegurl",
                        duration_s=info.duration_s, width=info.width, height=info.height,
                        codec=info.video_codec, meta={"segments": segments}, **common,
                    ),
                    "thumbnail": record_asset(
                        session, business_key=keys["thumbnail"], kind="THUMBNAIL", bucket=thumb.bucket,
                        key=thumb.key, size=thumb.size, sha256=thumb.sha256, mime="image/jpeg",
                        width=thumb_info.width, height=thumb_info.height, codec=thumb_info.video_codec, **common,
                    ),
                }
                session.get(Task, task.id).output_asset_id = rows["proxy"].id
                refs = {p: asset_ref(a) for p, a in rows.items()}
        return TranscodeResult(**refs)
