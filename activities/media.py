"""Make the playable renditions of a stored raw output: proxy MP4, HLS, thumbnail.

Keys and business keys come from the raw asset + profile + pipeline version, so a repeated run
(worker died mid-transcode) rewrites the same objects and finds the same rows.

Since renditions-v1 the proxy (`transcode_proxy`) is what a task needs to succeed; HLS and the
thumbnail (`make_renditions`) are a step of their own with its own retries, and each has a
rendition row that records READY or FAILED with the error: a failed HLS never loses the paid
output, and the next run of the step retries only what is not READY. ffmpeg's progress drives
the heartbeats; media errors are classified (adapters/media/ffmpeg_tools.py): an input ffprobe
cannot read (or over the caps) is not retried and its verdict is recorded, a timeout, a kill or
a full disk is. The old `transcode` activity stays for workflows started before the patch.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable
from pathlib import Path

from temporalio import activity
from temporalio.exceptions import ApplicationError, CancelledError

from activities.errors import OUTPUT_INVALID, business_failure, classified
from activities.failpoints import SLOW_TRANSCODE_S, armed, failpoint
from activities.fetch import asset_ref
from activities.heartbeats import QuietHeartbeat
from adapters.media.ffmpeg_tools import MediaLimits, MediaUnreadable
from adapters.media.transcode import (
    MediaError,
    MediaInfo,
    RunOptions,
    check_input_caps,
    make_hls,
    make_proxy,
    make_thumbnail,
    probe,
)
from adapters.storage import ObjectStorage
from contracts.messages import (
    AssetRef,
    RenditionOut,
    RenditionProfile,
    RenditionsResult,
    RenditionStatus,
    TranscodeInput,
    TranscodeResult,
)
from schema.assets import find_asset, record_asset
from schema.db import Database
from schema.models import Asset, Task
from schema.renditions import record_rendition

PIPELINE_VERSION = "v1"
_Maker = Callable[[Task, Asset, Path, MediaInfo, Path], AssetRef]
PROFILES = ("proxy", "hls", "thumbnail")
RENDITION_TRIES = 3  # in the media step, a failed HLS or thumbnail is made again this many times in all
RENDITION_FAILED = "RenditionFailed"  # retryable: the renditions step runs again for what failed


def rendition_prefix(task: Task, raw: Asset, profile: str) -> str:
    """Where one attempt's rendition lives: a regenerated attempt (review) gets its own folder, so
    the earlier attempt's rows keep naming their own bytes."""
    return f"tenants/{task.tenant_id}/tasks/{task.id}/{profile}/{PIPELINE_VERSION}/a{raw.meta['attempt_no']}"


def rendition_key(raw_asset_id: str, profile: str) -> str:
    """The asset business key of one rendition (the same as the pre-patch transcode's)."""
    return f"{raw_asset_id}:{profile}:{PIPELINE_VERSION}"


def _heartbeat(step: str) -> Callable[[float], None]:
    """ffmpeg's progress as the step's heartbeat, from QUIET_S on (a short transcode sends none)."""
    heartbeat = QuietHeartbeat()

    def beat(out_time_s: float) -> None:
        heartbeat({"step": step, "out_time_s": round(out_time_s, 1)})

    return beat


def _media_failure(what: str, exc: MediaError) -> ApplicationError:
    """Unreadable or over the caps: a business failure; anything else is retried by policy."""
    if not exc.retryable:
        return business_failure(f"{what}: {exc}", OUTPUT_INVALID)
    return ApplicationError(f"{what}: {exc}", type=type(exc).__name__)


class MediaActivities:
    def __init__(
        self, db: Database, storage: ObjectStorage, *, limits: MediaLimits | None = None,
        max_input_pixels: int = 3840 * 2160, max_input_duration_s: float = 120.0,
    ):
        self.db = db
        self.storage = storage
        self.limits = limits or MediaLimits()
        self.max_input_pixels = max_input_pixels
        self.max_input_duration_s = max_input_duration_s

    @activity.defn(name="transcode")
    @classified
    def transcode(self, req: TranscodeInput) -> TranscodeResult:
        """All three renditions or a failure: the step of workflows started before renditions-v1."""
        proxy = self._proxy(req)
        made = self._renditions(req)
        refs = {r.profile.value.lower(): r.asset for r in made.renditions}
        if not all(refs.values()):
            raise ApplicationError(f"renditions failed: {made.summary()}", type=RENDITION_FAILED)
        return TranscodeResult(proxy=proxy, **refs)

    @activity.defn(name="transcode_proxy")
    @classified
    def transcode_proxy(self, req: TranscodeInput) -> AssetRef:
        """The proxy MP4 of the raw output: what the task needs to succeed."""
        return self._proxy(req)

    def proxy_in(self, req: TranscodeInput, work: Path) -> tuple[AssetRef, Path | None]:
        """The proxy, made in `work` (the media step's folder, lean-path-v1); its local copy when this run
        made it (None: an earlier run did, and it is in storage)."""
        proxy = self._proxy(req, work)
        local = work / "main.mp4"
        return proxy, local if local.exists() else None

    def renditions_in(self, req: TranscodeInput, work: Path, proxy: Path | None) -> RenditionsResult:
        """HLS and thumbnail from the local proxy when there is one, a failed one tried again up to
        RENDITION_TRIES in all; each outcome recorded on its row, none failing the step (the media step,
        lean-path-v1: `reelqueue renditions --retry` makes later what still failed)."""
        made = self._renditions(req, work, proxy)
        for _ in range(RENDITION_TRIES - 1):
            if all(r.status is RenditionStatus.READY for r in made.renditions):
                break
            made = self._renditions(req, work, proxy)  # only what is not READY is made again
        return made

    @activity.defn(name="make_renditions")
    @classified
    def make_renditions(self, req: TranscodeInput) -> RenditionsResult:
        """HLS and thumbnail of the stored proxy; each outcome is recorded on its rendition row. Raises
        (retryable) while one failed for a reason worth retrying, so the step's own policy retries it."""
        made = self._renditions(req)
        failed = [r for r in made.renditions if r.status is RenditionStatus.FAILED]
        if failed:
            raise ApplicationError(f"renditions failed: {'; '.join(f'{r.profile.value}: {r.error}' for r in failed)}",
                                   type=RENDITION_FAILED)
        return made

    # -- the steps ---------------------------------------------------------------------------

    def _load(self, req: TranscodeInput) -> tuple[Task, Asset]:
        with self.db.transaction() as session:
            task, raw = session.get(Task, req.task_id), session.get(Asset, req.raw_asset_id)
            session.expunge_all()
        return task, raw

    def _options(self, step: str, read_rate: float | None = None) -> RunOptions:
        return RunOptions(limits=self.limits, on_progress=_heartbeat(step), read_rate=read_rate)

    def _proxy(self, req: TranscodeInput, work: Path | None = None) -> AssetRef:
        """The proxy, made in `work` (kept there for the media step's next parts) or a folder of its own."""
        business_key = rendition_key(req.raw_asset_id, "proxy")
        with self.db.transaction() as session:
            done = find_asset(session, business_key)
            if done is not None:
                return asset_ref(done)
        task, raw = self._load(req)
        with contextlib.ExitStack() as stack:
            tmp = work or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rq-media-")))
            src = self.storage.get_to_file(raw.key, tmp / "raw.mp4")
            dst = tmp / "main.mp4"
            try:
                source = probe(src, self.limits)
                check_input_caps(source, max_pixels=self.max_input_pixels, max_duration_s=self.max_input_duration_s)
                info = make_proxy(src, dst, task.aspect_ratio, options=self._options("proxy", _slowed(source)),
                                  source=source)
            except MediaError as exc:
                self._failed(task, raw, RenditionProfile.PROXY, exc)
                raise _media_failure("raw output cannot be transcoded", exc) from exc
            finally:
                src.unlink(missing_ok=True)
            proxy = self.storage.put_file(f"{rendition_prefix(task, raw, 'proxy')}/main.mp4", dst, "video/mp4")
        failpoint("after_transcode_before_db")
        with self.db.transaction() as session:
            row = record_asset(
                session, business_key=business_key, kind="PROXY", bucket=proxy.bucket, key=proxy.key,
                size=proxy.size, sha256=proxy.sha256, mime="video/mp4", duration_s=info.duration_s,
                width=info.width, height=info.height, codec=info.video_codec, meta={"audio_codec": info.audio_codec},
                **_owner(task),
            )
            self._ready(session, task, raw, RenditionProfile.PROXY, row)
            session.get(Task, task.id).output_asset_id = row.id
            return asset_ref(row)

    def _renditions(self, req: TranscodeInput, work: Path | None = None, local: Path | None = None) -> RenditionsResult:
        """HLS and thumbnail of the proxy (`local`, or downloaded once into `work` or a folder of its own)."""
        task, raw = self._load(req)
        makers: dict[RenditionProfile, _Maker] = {RenditionProfile.HLS: self._hls,
                                                   RenditionProfile.THUMBNAIL: self._thumbnail}
        with self.db.transaction() as session:
            proxy = find_asset(session, rendition_key(raw.id, "proxy"))
            done = {p: find_asset(session, rendition_key(raw.id, p.value.lower())) for p in makers}
            session.expunge_all()
        if proxy is None:
            raise ApplicationError(f"no proxy for raw output {raw.id} yet", type=RENDITION_FAILED)
        out: list[RenditionOut] = []
        with contextlib.ExitStack() as stack:
            tmp = work or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rq-renditions-")))
            for profile, make in makers.items():
                if done[profile] is not None:
                    out.append(RenditionOut(profile=profile, status=RenditionStatus.READY,
                                            asset=asset_ref(done[profile])))
                    continue
                try:
                    local = local or self.storage.get_to_file(proxy.key, tmp / "main.mp4")
                    asset = make(task, raw, local, stored_media_info(proxy), tmp)
                except CancelledError:
                    raise
                except Exception as exc:  # recorded on its row; the proxy and the task are unaffected
                    activity.logger.warning("%s of task %s failed: %s", profile.value, task.id, exc)
                    self._failed(task, raw, profile, exc)
                    out.append(RenditionOut(profile=profile, status=RenditionStatus.FAILED, error=str(exc)[:500]))
                    continue
                out.append(RenditionOut(profile=profile, status=RenditionStatus.READY, asset=asset))
        return RenditionsResult(renditions=out)

    def _hls(self, task: Task, raw: Asset, proxy: Path, info: MediaInfo, work: Path) -> AssetRef:
        failpoint("make_hls")
        hls = make_hls(proxy, work / "hls", options=self._options("hls"), info=info)
        prefix = rendition_prefix(task, raw, "hls")
        segments = [self.storage.put_file(f"{prefix}/{seg.name}", seg, "video/mp2t").key for seg in hls.segments]
        playlist = self.storage.put_file(f"{prefix}/{hls.playlist.name}", hls.playlist,
                                         "application/vnd.apple.mpegurl")
        return self._stored(task, raw, RenditionProfile.HLS, playlist, "application/vnd.apple.mpegurl", info,
                            meta={"segments": segments})

    def _thumbnail(self, task: Task, raw: Asset, proxy: Path, info: MediaInfo, work: Path) -> AssetRef:
        path = make_thumbnail(proxy, work / "thumb.jpg", options=self._options("thumbnail"), info=info)
        thumb = self.storage.put_file(f"{rendition_prefix(task, raw, 'thumbnail')}/thumb.jpg", path, "image/jpeg")
        frame = MediaInfo(format_name="image2", width=info.width, height=info.height, video_codec="mjpeg",
                          size=thumb.size)  # a frame of the proxy, at its size
        return self._stored(task, raw, RenditionProfile.THUMBNAIL, thumb, "image/jpeg", frame)

    def _stored(self, task: Task, raw: Asset, profile: RenditionProfile, obj, mime: str,  # noqa: ANN001
                info: MediaInfo, meta: dict | None = None) -> AssetRef:
        with self.db.transaction() as session:
            row = record_asset(
                session, business_key=rendition_key(raw.id, profile.value.lower()), kind=profile.value,
                bucket=obj.bucket, key=obj.key, size=obj.size, sha256=obj.sha256, mime=mime,
                duration_s=info.duration_s, width=info.width, height=info.height, codec=info.video_codec,
                meta=meta, **_owner(task),
            )
            self._ready(session, task, raw, profile, row)
            return asset_ref(row)

    @staticmethod
    def _ready(session, task: Task, raw: Asset, profile: RenditionProfile, row: Asset) -> None:  # noqa: ANN001
        record_rendition(session, tenant_id=task.tenant_id, task_id=task.id, raw_asset_id=raw.id,
                         profile=profile.value, pipeline_version=PIPELINE_VERSION, asset_id=row.id)

    def _failed(self, task: Task, raw: Asset, profile: RenditionProfile, exc: Exception) -> None:
        with self.db.transaction() as session:
            record_rendition(
                session, tenant_id=task.tenant_id, task_id=task.id, raw_asset_id=raw.id, profile=profile.value,
                pipeline_version=PIPELINE_VERSION, error=str(exc)[:2000], error_class=type(exc).__name__,
                verdict=exc.verdict if isinstance(exc, MediaUnreadable) else None,
            )


def stored_media_info(asset: Asset) -> MediaInfo:
    """What a stored rendition's row says about its media (probed when it was made): the next
    steps need not start ffprobe again."""
    return MediaInfo(format_name="mp4", duration_s=asset.duration_s, width=asset.width, height=asset.height,
                     video_codec=asset.codec, audio_codec=(asset.meta or {}).get("audio_codec"), size=asset.size)


def _owner(task: Task) -> dict[str, str]:
    return {"tenant_id": task.tenant_id, "task_id": task.id, "pipeline_version": PIPELINE_VERSION}


def _slowed(source: MediaInfo) -> float | None:
    """The `slow_transcode` failpoint: read the input so slowly that the proxy takes SLOW_TRANSCODE_S."""
    if armed("slow_transcode") != "slow" or not source.duration_s:
        return None
    return source.duration_s / SLOW_TRANSCODE_S
