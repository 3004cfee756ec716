"""Job lifecycle: every status change goes through here, so each one fires its webhook."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime

from emulator.config import EmulatorConfig
from emulator.signing import file_token
from emulator.store import JobRecord, JobStore
from emulator.webhooks import WebhookSender
from emulator.wire import ErrorOut, JobOut, OutputOut, SimJobOut, SubmitIn, UsageOut


def _ts(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


class JobService:
    def __init__(self, config: EmulatorConfig, store: JobStore, webhooks: WebhookSender):
        self.config = config
        self.store = store
        self.webhooks = webhooks

    def create(self, body: SubmitIn, *, fail_injected: bool) -> JobRecord:
        """A new queued job; no dedupe on request_key, exactly like the real providers."""
        now = time.time()
        job = JobRecord(
            id=f"job_{uuid.uuid4().hex}",
            status="queued",
            created_at=now,
            updated_at=now,
            fail_injected=fail_injected,
            **body.model_dump(),
        )
        self.store.insert(job)
        self._changed(job)
        return job

    def cancel(self, job_id: str) -> JobRecord | None:
        """Cancel if not finished; a terminal job is returned unchanged. None if unknown."""
        changed = self.store.transition(job_id, "canceled", only_from=("queued", "running"))
        if changed:
            self._changed(changed)
            return changed
        return self.store.get(job_id)

    def claim_next(self) -> JobRecord | None:
        claimed = self.store.claim_next()
        if claimed is None:
            return None
        job, before = claimed
        if before != job.status:
            self._changed(job)
        return job

    def succeed(self, job: JobRecord) -> bool:
        cost = round(job.duration_s * self.config.price_per_second, 6)
        return self._finish(job.id, "succeeded", progress=1.0, cost=cost)

    def fail(self, job: JobRecord, code: str, message: str) -> bool:
        return self._finish(job.id, "failed", error_code=code, error_message=message)

    def _finish(self, job_id: str, status: str, **fields: object) -> bool:
        changed = self.store.transition(job_id, status, only_from=("running",), **fields)
        if changed:
            self._changed(changed)
        return changed is not None

    def _changed(self, job: JobRecord) -> None:
        if job.webhook_url:
            self.webhooks.send(job.webhook_url, self.view(job).model_dump_json().encode())

    def view(self, job: JobRecord) -> JobOut:
        """The public JSON of a job; output URLs are signed afresh on every read."""
        out = JobOut(
            id=job.id,
            request_key=job.request_key,
            model=job.model,
            aspect_ratio=job.aspect_ratio,
            duration_s=job.duration_s,
            status=job.status,  # type: ignore[arg-type]
            progress=1.0 if job.status == "succeeded" else min(job.progress, 1.0),
            created_at=_ts(job.created_at),
            updated_at=_ts(job.updated_at),
        )
        if job.status == "succeeded":
            expires = int(time.time() + self.config.url_ttl_s)
            token = file_token(self.config.url_secret, job.id, expires)
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
            fail_injected=job.fail_injected,
            webhook_url=job.webhook_url,
        )
