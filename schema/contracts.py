"""Inputs and results passed between the workflow and its activities (one model per call).

Pure pydantic, no I/O imports: the workflow sandbox imports this module. Only ids, keys and small
facts travel through Temporal history, never media bytes (payloads fail at 2 MB).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from schema.state_machine import TaskEvent


class GenerationInput(BaseModel):
    task_id: str


class CancelRequest(BaseModel):
    reason: str = "requested by user"
    requested_by: str = "cli"


class ProviderUpdate(BaseModel):
    """Sent by the webhook gateway: a hint to poll now, never trusted as the status itself."""

    job_id: str
    status: str | None = None
    event_id: str | None = None


class TaskRef(BaseModel):
    task_id: str


class TaskInfo(BaseModel):
    task_id: str
    tenant_id: str
    status: str
    provider: str
    model: str
    aspect_ratio: str
    duration_s: float
    estimated_cost: float
    min_poll_interval_s: float
    deadline_s: float
    current_attempt_no: int


class ValidationResult(BaseModel):
    ok: bool
    reason: str | None = None
    info: TaskInfo


class TransitionInput(BaseModel):
    task_id: str
    event: TaskEvent
    source_event_id: str
    source: str = "workflow"
    attempt_no: int | None = None
    payload: dict[str, Any] = Field(default_factory=dict)
    error_class: str | None = None
    error: str | None = None
    cancel_outcome: str | None = None


class TransitionResult(BaseModel):
    applied: bool
    status: str
    version: int


class AttemptRef(BaseModel):
    task_id: str
    attempt_no: int


class SubmitActivityResult(BaseModel):
    outcome: str  # adapters.providers.base.SubmitOutcome value
    job_id: str | None = None
    error_class: str | None = None
    error: str | None = None
    retry_after_s: float | None = None


class ReconcileResult(BaseModel):
    found: bool
    job_id: str | None = None
    duplicates: list[str] = Field(default_factory=list)


class JobRef(BaseModel):
    task_id: str
    attempt_no: int
    job_id: str


class PollResult(BaseModel):
    status: str  # adapters.providers.base.JobStatus value
    raw_status: str
    progress: float | None = None
    cost: float | None = None
    error_class: str | None = None
    error: str | None = None


class AssetRef(BaseModel):
    asset_id: str
    kind: str
    key: str
    sha256: str
    size: int


class TranscodeInput(BaseModel):
    task_id: str
    raw_asset_id: str


class TranscodeResult(BaseModel):
    proxy: AssetRef
    hls: AssetRef
    thumbnail: AssetRef


class SettleInput(BaseModel):
    task_id: str
    attempt_no: int | None = None
    cost: float


class ReleaseInput(BaseModel):
    task_id: str
    reason: str


class LedgerResult(BaseModel):
    reserved: float
    settled: float
    released: float
    adjusted: float = 0.0


class GenerationOutcome(BaseModel):
    task_id: str
    status: str
    attempts: int
    cost: float
    error: str | None = None
