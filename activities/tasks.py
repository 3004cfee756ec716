"""Task facts for the workflow: input validation and recording state transitions."""

from __future__ import annotations

from sqlalchemy.orm import Session
from temporalio import activity

from activities.errors import classified
from adapters.providers.base import VideoProvider
from adapters.storage import ObjectStorage
from catalog.plan import Deadlines
from catalog.plan import Plan as PlanSpec
from metrics import STATE_SECONDS, TRANSITION_CONFLICTS, TRANSITIONS
from schema import task_store
from schema.contracts import TaskInfo, TaskRef, TransitionInput, TransitionResult, ValidationResult
from schema.db import Database
from schema.models import Asset, Plan, Task


class TaskActivities:
    def __init__(self, db: Database, storage: ObjectStorage, providers: dict[str, VideoProvider]):
        self.db = db
        self.storage = storage
        self.providers = providers
        self._plans: dict[str, PlanSpec] = {}  # plan id (its content hash) -> the validated plan

    def _plan(self, session: Session, plan_id: str) -> PlanSpec:
        """A plan's id is the hash of its content, so each is read and validated once per process,
        not once per task (thousands of tasks share one plan)."""
        if plan_id not in self._plans:
            self._plans[plan_id] = PlanSpec.model_validate(session.get(Plan, plan_id).content)
        return self._plans[plan_id]

    @activity.defn(name="record_transition")
    @classified
    def record_transition(self, req: TransitionInput) -> TransitionResult:
        """Apply one state-machine event; idempotent per source_event_id."""
        updates = {}
        if req.error_class is not None or req.error is not None:
            updates = {"last_error_class": req.error_class, "last_error": req.error}
        if req.cancel_outcome is not None:
            updates["cancel_outcome"] = req.cancel_outcome
        updates["next_retry_at"] = req.next_retry_at  # set while RETRY_WAIT, cleared by any other move
        payload = dict(req.payload)
        if req.error:
            payload.setdefault("error", req.error)
        with self.db.transaction() as session:
            out = task_store.transition(
                session, req.task_id, req.event, source=req.source, source_event_id=req.source_event_id,
                attempt_no=req.attempt_no, payload=payload, task_updates=updates,
            )
        _observe(req, out)
        return TransitionResult(applied=out.applied, status=out.status, version=out.version)

    @activity.defn(name="validate_task")
    @classified
    def validate_task(self, ref: TaskRef) -> ValidationResult:
        """Check inputs before anything costs money: image stored intact, route supported."""
        with self.db.transaction() as session:
            task = session.get(Task, ref.task_id)
            if task is None:
                raise task_store.TaskNotFound(ref.task_id)
            image = session.get(Asset, task.image_asset_id) if task.image_asset_id else None
            plan = self._plan(session, task.plan_id)
        provider = self.providers.get(task.provider)
        deadlines = plan.deadlines or Deadlines()
        info = TaskInfo(
            task_id=task.id, tenant_id=task.tenant_id, status=task.status, provider=task.provider,
            model=task.model, aspect_ratio=task.aspect_ratio, duration_s=float(task.duration_s),
            estimated_cost=float(task.estimated_cost),
            min_poll_interval_s=provider.capabilities.min_poll_interval_s if provider else 1.0,
            deadline_s=deadlines.job_minutes * 60, task_deadline_s=deadlines.task_hours * 3600,
            plan_limits=plan.limits_for(task.provider), current_attempt_no=task.current_attempt_no,
        )
        reason = _invalid_reason(task, provider, image, self.storage)
        return ValidationResult(ok=reason is None, reason=reason, info=info)


def _observe(req: TransitionInput, out: task_store.TransitionOutcome) -> None:
    """Metrics of one recorded transition (a repeat of an event already recorded counts nothing)."""
    if out.duplicate:
        return
    TRANSITIONS.labels(req.event.value, str(out.applied).lower()).inc()
    if out.conflicts:
        TRANSITION_CONFLICTS.labels("version").inc(out.conflicts)
    if not out.applied:
        TRANSITION_CONFLICTS.labels("illegal").inc()
    elif out.left_after_s is not None:
        STATE_SECONDS.labels(out.from_status).observe(out.left_after_s)


def _invalid_reason(
    task: Task, provider: VideoProvider | None, image: Asset | None, storage: ObjectStorage
) -> str | None:
    if provider is None:
        return f"no adapter for provider {task.provider!r}"
    caps = provider.capabilities
    if task.aspect_ratio not in caps.aspect_ratios:
        return f"{task.provider} does not render {task.aspect_ratio}"
    if not caps.min_duration_s <= float(task.duration_s) <= caps.max_duration_s:
        return f"duration {task.duration_s}s outside {caps.min_duration_s}-{caps.max_duration_s}s"
    if not task.prompt.strip():
        return "empty prompt"
    if task.image_asset_id:
        if image is None:
            return "input image asset record missing"
        stored = storage.stat(image.key)
        if stored is None or stored.sha256 != image.sha256:
            return f"input image {image.key} missing or changed in storage"
    return None

