"""Render threads: they only render. Take the longest-running job without a video, fetch its
image, produce its clip (from the render cache, else with ffmpeg) and record the outcome.

Job time is the clock's business (emulator/clock.py), so `render_workers` bounds ffmpeg
processes, not jobs in flight. A render stopped by shutdown leaves its job `running`; the next
process starts it again and renders it anew.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

from emulator.cache import RenderCache, clip_key, file_sha256
from emulator.config import EmulatorConfig
from emulator.render import RenderError, fetch_image, render_video
from emulator.stats import StatsBoard
from emulator.store import JobRecord, JobStore
from emulator.wire import MODERATED_WORD

log = logging.getLogger("emulator.worker")
_IDLE_S = 0.5


class RenderPool:
    def __init__(
        self,
        store: JobStore,
        config: EmulatorConfig,
        stats: StatsBoard,
        on_rendered: Callable[[], None] = lambda: None,
    ):
        self._store = store
        self._config = config
        self._stats = stats
        self._on_rendered = on_rendered  # the job may be due now
        self._cache = RenderCache(config.cache_dir, config.render_cache_max)
        self._stop = threading.Event()
        self._wake = threading.Condition()
        self._threads = [
            threading.Thread(target=self._loop, name=f"emulator-render-{i}", daemon=True)
            for i in range(config.render_workers)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self.wake()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            if thread.is_alive():
                thread.join(max(0.0, deadline - time.monotonic()))

    def wake(self) -> None:
        """A job started running: don't wait for the idle poll."""
        with self._wake:
            self._wake.notify_all()

    def _loop(self) -> None:
        while not self._stop.is_set():
            job = self._store.claim_render()
            if job is None:
                with self._wake:
                    self._wake.wait(_IDLE_S)
                continue
            try:
                failure = self._render(job)
            except Exception as exc:  # a bug in one render must not kill the thread
                log.exception("render of %s crashed", job.id)
                failure = RenderError("INTERNAL.RENDER_CRASHED", str(exc))
            if self._stop.is_set():
                return  # maybe cut short: the next process renders the job again
            code, message = (failure.code, failure.message) if failure else (None, None)
            self._store.render_done(job.id, code, message)
            self._on_rendered()

    def _render(self, job: JobRecord) -> RenderError | None:
        """Produce the job's clip; the failure to report, if any."""
        work_dir = self._config.work_dir(job.id)
        work_dir.mkdir(parents=True, exist_ok=True)
        try:
            if job.fail_injected:
                raise RenderError("INTERNAL.SIMULATED_FAILURE", "failure injected by /_sim/faults")
            if MODERATED_WORD in job.prompt.lower():  # the content filter: a moderation failure
                raise RenderError("SAFETY.INPUT.TEXT", "the prompt was flagged by the content filter")
            image = self._fetch(job.image_url, work_dir) if job.image_url else None
            self._produce(job, image, work_dir)
        except RenderError as exc:
            return exc
        finally:
            shutil.rmtree(work_dir, ignore_errors=True)
        return None

    def _fetch(self, url: str, work_dir: Path) -> Path:
        return fetch_image(
            url,
            work_dir / "input",
            timeout_s=self._config.fetch_timeout_s,
            max_bytes=self._config.max_image_bytes,
        )

    def _produce(self, job: JobRecord, image: Path | None, work_dir: Path) -> None:
        """Link the cached clip for these inputs, or render it and cache it."""
        key = clip_key(
            image_sha256=file_sha256(image) if image else None,
            aspect_ratio=job.aspect_ratio,
            duration_s=job.duration_s,
            overlay_lines=job.overlay_lines,
            mode=self._config.render,
            defect=job.defect,
        )
        dst = self._config.output_path(job.id)
        if self._cache.fetch(key, dst):
            self._stats.add("render_cache_hits")
            return
        render_video(
            dst,
            image=image,
            aspect_ratio=job.aspect_ratio,
            duration_s=job.duration_s,
            overlay_lines=job.overlay_lines,
            work_dir=work_dir,
            mode=self._config.render,
            defect=job.defect,
        )
        self._stats.add("renders")
        self._cache.store(key, dst)
