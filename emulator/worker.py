"""Render threads: claim the oldest job, render it, keep it running for at least job_seconds.

The sqlite table is the queue (bounded by `max_queued` at submit), so queued work survives a
restart with no extra bookkeeping. A render stopped by shutdown leaves its job `running`; the
next process claims and renders it again.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time

from emulator.config import EmulatorConfig
from emulator.faults import FaultBoard
from emulator.render import RenderError, fetch_image, render_video
from emulator.service import JobService
from emulator.store import JobRecord

log = logging.getLogger("emulator.worker")
_TICK_S = 0.2
_IDLE_S = 0.5


class RenderPool:
    def __init__(self, service: JobService, config: EmulatorConfig, faults: FaultBoard | None = None):
        self._service = service
        self._config = config
        self._faults = faults or FaultBoard()
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
        """A job was queued: don't wait for the idle poll."""
        with self._wake:
            self._wake.notify_all()

    def _loop(self) -> None:
        while not self._stop.is_set():
            job = self._service.claim_next()
            if job is None:
                with self._wake:
                    self._wake.wait(_IDLE_S)
                continue
            try:
                self._run(job)
            except Exception as exc:  # a bug in one render must not kill the thread
                log.exception("render of %s crashed", job.id)
                self._service.fail(job, "INTERNAL.RENDER_CRASHED", str(exc))

    def _run(self, job: JobRecord) -> None:
        started = time.monotonic()
        work_dir = self._config.work_dir(job.id)
        work_dir.mkdir(parents=True, exist_ok=True)
        try:
            if job.fail_injected:
                raise RenderError("INTERNAL.SIMULATED_FAILURE", "failure injected by /_sim/faults")
            image = None
            if job.image_url:
                image = fetch_image(
                    job.image_url,
                    work_dir / "input",
                    timeout_s=self._config.fetch_timeout_s,
                    max_bytes=self._config.max_image_bytes,
                )
            self._service.store.set_progress(job.id, 0.3)
            render_video(
                self._config.output_path(job.id),
                image=image,
                aspect_ratio=job.aspect_ratio,
                duration_s=job.duration_s,
                overlay_lines=job.overlay_lines,
                work_dir=work_dir,
            )
        except RenderError as exc:
            if self._hold(job, started):
                self._service.fail(job, exc.code, exc.message)
            return
        finally:
            shutil.rmtree(work_dir, ignore_errors=True)
        if self._hold(job, started):
            self._service.succeed(job)

    def _hold(self, job: JobRecord, started: float) -> bool:
        """Stay running until job_seconds have passed, reporting progress. False if the job was
        canceled meanwhile or the pool is stopping (then the job stays for the next process)."""
        override = self._faults.snapshot().job_seconds
        job_seconds = self._config.job_seconds if override is None else override
        deadline = started + job_seconds
        while (now := time.monotonic()) < deadline:
            progress = 0.3 + 0.65 * (now - started) / max(job_seconds, 1e-6)
            if not self._service.store.set_progress(job.id, min(progress, 0.95)):
                return False
            if self._stop.wait(min(_TICK_S, deadline - now)):
                return False
        return not self._stop.is_set()
