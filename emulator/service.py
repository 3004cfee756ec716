"""Job lifecycle: every status change goes through here, so each one fires its webhook.

queued -> (throttled ->) running -> succeeded | failed, and canceled from any of the first three.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from adapters.providers.emulator_api import ErrorOut, JobOut, OutputOut, SubmitIn, UsageOut
from emulator.config import EmulatorConfig
from emulator.faults import OWN_API
from emulator.signing import file_token
from emulator.store import JobRecord, JobStore
from emulator.timing import PROGRESS_CAP, running_progress
from emulator.webhooks import WebhookSender
from emulator.wire import ALIVE, SimJobOut


def _ts(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


class JobService:
    def __init__(self, config: EmulatorConfig, store: JobStore, webhooks: WebhookSender, dialects: Iterable[str] = ()):
        """`dialects`: the prefixes of the dialects' request keys (their jobs' webhooks take that
        dialect's faults)."""
        self.config = config
        self.store = store
        self.webhooks = webhooks
        self.dialects = frozenset(dialects)
        # dialect -> the body its jobs' webhooks carry (the dialect's own job JSON)
        self.webhook_bodies: dict[str, Callable[[JobOut], bytes]] = {}

    def create(self, body: SubmitIn, *, fail_injected: bool, announce_now: bool = False,
               defect: str | None = None) -> JobRecord:
        """A new queued job; no dedupe on request_key, exactly like the real providers.
        `announce_now`: its first webhook is delivered before this returns (a fault: the event
        beats the submit's answer)."""
        now = time.time()
        job = JobRecord(
            id=f"job_{uuid.uuid4().hex}",
            status="queued",
            created_at=now,
            updated_at=now,
            fail_injected=fail_injected,
            defect=defect,
            **body.model_dump(),
        )
        self.store.insert(job)
        self._changed(job, now=announce_now)
        return job

    def cancel(self, job_id: str) -> JobRecord | None:
        """Cancel if not finished; a terminal job is returned unchanged. None if unknown."""
        changed = self.store.transition(job_id, "canceled", only_from=ALIVE)
        if changed:
            self._changed(changed)
            return changed
        return self.store.get(job_id)

    def change(self, job_id: str, *, cost: float | None, finish_now: bool) -> JobRecord | None:
        """A change after the fact (the /_sim hook): a succeeded job re-rated, a running job's time
        up now; no webhook (the provider says nothing of it). None if the job is not in the state
        the change needs."""
        changed: JobRecord | None = self.store.get(job_id)
        if cost is not None:
            changed = self.store.transition(job_id, "succeeded", only_from=("succeeded",), cost=round(cost, 6))
        if finish_now and changed is not None:
            changed = self.store.transition(job_id, "running", only_from=("running",), job_s=0.0)
        return changed

    def start(self, job: JobRecord, job_s: float) -> JobRecord | None:
        """Start the job's timer and queue its render (again, for a job a dead process left
        running); None if it was canceled meanwhile."""
        started = self.store.transition(
            job.id,
            "running",
            only_from=(job.status,),
            started_at=time.time(),
            job_s=job_s,
            owner=self.store.owner,
            render_state=None,
            error_code=None,
            error_message=None,
            progress=0.0,
        )
        if started and job.status != "running":
            self._changed(started)
        return started

    def throttle(self, job: JobRecord) -> None:
        """A queued job that cannot run yet: over the running limit, like Runway's THROTTLED."""
        changed = self.store.transition(job.id, "throttled", only_from=("queued",))
        if changed:
            self._changed(changed)

    def finish(self, job: JobRecord) -> bool:
        """End a running job whose time is up and render done: failed if the render failed."""
        if job.error_code:
            return self._finish(job.id, "failed", progress=PROGRESS_CAP)
        cost = round(job.duration_s * self.config.price_per_second, 6)
        return self._finish(job.id, "succeeded", progress=1.0, cost=cost)

    def _finish(self, job_id: str, status: str, **fields: object) -> bool:
        changed = self.store.transition(job_id, status, only_from=("running",), **fields)
        if changed:
            self._changed(changed)
        return changed is not None

    def _changed(self, job: JobRecord, *, now: bool = False) -> None:
        if not job.webhook_url:
            return
        send = self.webhooks.send_now if now else self.webhooks.send
        prefix = job.request_key.partition(":")[0]
        render = self.webhook_bodies.get(prefix)
        view = self.view(job)
        send(job.webhook_url, render(view) if render else view.model_dump_json().encode(), job_id=job.id,
             dialect=prefix if prefix in self.dialects else OWN_API)

    def view(self, job: JobRecord, *, dead_url: bool = False) -> JobOut:
        """The public JSON of a job; output URLs are signed afresh on every read. `dead_url`: the
        URL is signed to expire now while `expires_at` shows the normal lifetime (a fault)."""
        out = JobOut(
            id=job.id,
            request_key=job.request_key,
            model=job.model,
            aspect_ratio=job.aspect_ratio,
            duration_s=job.duration_s,
            status=job.status,  # type: ignore[arg-type]
            progress=_progress(job, time.time()),
            created_at=_ts(job.created_at),
            updated_at=_ts(job.updated_at),
        )
        if job.status == "succeeded":
            expires = int(time.time() + self.config.url_ttl_s)
            token = file_token(self.config.url_secret, job.id, int(time.time()) if dead_url else expires)
            out.output = [
                OutputOut(url=f"{self.config.base_url}/files/{job.id}/{token}.mp4", expires_at=_ts(expires))
            ]
            out.usage = UsageOut(seconds=job.duration_s, cost=job.cost or 0.0)
        if job.status == "failed":
            out.error = ErrorOut(code=job.error_code or "INTERNAL.UNKNOWN", message=job.error_message or "")
        return out

    def sim_view(self, job: JobRecord) -> SimJobOut:
        return SimJobOut(
            **self.view(job).model_dump(),
            renders=job.renders,
            render_state=job.render_state,
            fail_injected=job.fail_injected,
            defect=job.defect,
            webhook_url=job.webhook_url,
        )


def _progress(job: JobRecord, now: float) -> float:
    """Rises with the job time while running; the stored value otherwise (0 while waiting)."""
    if job.status == "succeeded":
        return 1.0
    if job.status == "running" and job.started_at is not None and job.job_s is not None:
        return running_progress(job.started_at, job.job_s, now)
    return min(job.progress, 1.0)
