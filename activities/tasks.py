"""Task facts for the workflow: input validation and recording state transitions.

Validation is where "no image, no submit" holds: a task imported with `--no-check-urls` carries
only its image URL, so validation fetches the image through the SSRF-safe fetcher, stores it under
its sha256 and links the asset to the task before anything costs money; an image that cannot be
fetched makes the task INVALID (like an unreachable image at import), and a task without a stored
image is never valid.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from sqlalchemy import select, update
from sqlalchemy.orm import Session
from temporalio import activity

from activities.errors import classified
from adapters.fetcher import SafeFetcher
from adapters.providers.base import VideoProvider
from adapters.storage import ObjectStorage
from catalog.images import ImageResolver, is_url, record_image_asset
from catalog.plan import Deadlines, ReviewMode, ReviewSettings
from catalog.plan import Plan as PlanSpec
from config.defaults import AdmissionLayers
from contracts.messages import (
    ReviewPolicy,
    RouteFields,
    TaskInfo,
    TaskRef,
    TransitionInput,
    TransitionResult,
    ValidationResult,
)
from contracts.routing import Route
from contracts.task import TaskEvent
from metrics import STATE_SECONDS, TRANSITION_CONFLICTS, TRANSITIONS
from schema import quiet_progress, task_store
from schema.db import Database
from schema.import_scope import api_request, import_paused_by, priority_of
from schema.models import Asset, Plan, Product, Task, Tenant


class TaskActivities:
    def __init__(
        self, db: Database, storage: ObjectStorage, providers: dict[str, VideoProvider], image_fetcher: SafeFetcher,
        layers: AdmissionLayers | None = None,
    ):
        self.db = db
        self.storage = storage
        self.providers = providers
        self.layers = layers or AdmissionLayers()  # the platform's and the models' limits, configured
        self.image_fetcher = image_fetcher  # time-capped so that a resolve fits the step's timeout
        self._plans: dict[str, PlanSpec] = {}  # plan id (its content hash) -> the validated plan

    def plan(self, session: Session, plan_id: str) -> PlanSpec:
        """A plan's id is the hash of its content, so each is read and validated once per process,
        not once per task (thousands of tasks share one plan)."""
        if plan_id not in self._plans:
            self._plans[plan_id] = PlanSpec.model_validate(session.get(Plan, plan_id).content)
        return self._plans[plan_id]

    @activity.defn(name="record_transition")
    @classified
    def record_transition(self, req: TransitionInput) -> TransitionResult:
        """Apply one state-machine event; idempotent per source_event_id."""
        with self.db.transaction() as session:
            done = apply_moves(session, [req])
        return moved(done)[0]

    @activity.defn(name="validate_task")
    @classified
    def validate_task(self, ref: TaskRef) -> ValidationResult:
        """Check inputs before anything costs money: image stored intact, route supported."""
        return self.check(ref)

    def check(self, ref: TaskRef) -> ValidationResult:
        """validate_task's checks (the prepare step's first part): reads in short transactions, the
        image fetch and the storage check outside any."""
        with self.db.transaction() as session:
            task = session.get(Task, ref.task_id)
            if task is None:
                raise task_store.TaskNotFound(ref.task_id)
            image = session.get(Asset, task.image_asset_id) if task.image_asset_id else None
            product = session.get(Product, task.product_ref) if image is None else None
            plan = self.plan(session, task.plan_id)
            tenant_limit = _lowest(session.scalar(select(Tenant.max_concurrent).where(Tenant.id == task.tenant_id)),
                                   plan.own_limit(task.provider))
            paused_by = import_paused_by(session, task)
            asked = api_request(session, task)  # a generation of the tenant API: what it asked for
            priority = priority_of(asked, plan.priority)
            routes, lock_model = routes_of(asked, plan, task)
        image_error = None
        if product is not None and (product.image_asset_id or (product.image_url and is_url(product.image_url))):
            image, image_error = self._store_image(task, product)
        provider = self.providers.get(task.provider)
        deadlines = plan.deadlines or Deadlines()
        info = TaskInfo(
            task_id=task.id, tenant_id=task.tenant_id, status=task.status, aspect_ratio=task.aspect_ratio,
            duration_s=float(task.duration_s), estimated_cost=float(task.estimated_cost),
            deadline_s=deadlines.job_minutes * 60, task_deadline_s=deadlines.task_hours * 3600,
            current_attempt_no=task.current_attempt_no,
            review=review_policy(plan, task), checks=checks_policy(plan, task), tenant_max_concurrent=tenant_limit,
            paused_by=paused_by, platform_max_concurrent=self.layers.platform, priority=priority,
            routes=routes if len(routes) > 1 else [], lock_model=lock_model,
            **route_fields(plan, self.providers, self.layers, task.provider, task.model).model_dump(),
        )
        reason = image_error or _invalid_reason(task, provider, image, self.storage)
        return ValidationResult(ok=reason is None, reason=reason, info=info)

    def _store_image(self, task: Task, product: Product) -> tuple[Asset | None, str | None]:
        """Link the task to its product's image, fetching and storing it first unless another task
        of the product already did (import with URL checks off). Idempotent: content-addressed key,
        one asset per sha256, links set only while empty."""
        asset_id = product.image_asset_id
        if asset_id is None:
            resolver = ImageResolver(self.image_fetcher, self.storage, task.tenant_id, Path("."))  # URLs only
            outcome = resolver.resolve(product.image_url)
            if outcome.sha256 is None:
                return None, f"input image not stored: {outcome.error}"
            with self.db.transaction() as session:
                asset_id = record_image_asset(session, self.storage.bucket, task.tenant_id, outcome).id
        with self.db.transaction() as session:
            for model, ref in ((Task, task.id), (Product, product.id)):
                session.execute(update(model).where(model.id == ref, model.image_asset_id.is_(None))
                                .values(image_asset_id=asset_id))
            linked = session.get(Task, task.id, populate_existing=True).image_asset_id
            return session.get(Asset, linked), None


def task_routes(session: Session, plan: PlanSpec, task: Task) -> tuple[list[Route], bool]:
    """The routes the task may be generated on (`routes_of` what its API request asked, or its template)."""
    return routes_of(api_request(session, task), plan, task)


def routes_of(asked: dict | None, plan: PlanSpec, task: Task) -> tuple[list[Route], bool]:
    """The routes, the primary first, and whether the task is locked to the primary: what a generation of
    the API asked (`asked`, its request), or what the task's template says."""
    if asked is not None:
        primary = Route(provider=asked.get("provider", task.provider), model=asked.get("model", task.model))
        fallbacks = [Route.model_validate(r) for r in asked.get("fallbacks") or []]
        return [primary, *fallbacks], bool(asked.get("lock_model"))
    template = plan.template(task.template_id)
    if template is None:
        return [Route(provider=task.provider, model=task.model)], False
    return template.routes(), bool(template.lock_model)


def route_fields(plan: PlanSpec, providers: dict[str, VideoProvider], layers: AdmissionLayers, provider: str,
                 model: str) -> RouteFields:
    """The task facts that follow from its route (validation, and a route changed before an attempt)."""
    adapter = providers.get(provider)
    return RouteFields(provider=provider, model=model,
                       min_poll_interval_s=adapter.capabilities.min_poll_interval_s if adapter else 1.0,
                       plan_limits=plan.limits_for(provider), model_max_concurrent=layers.model(provider, model))


def _lowest(*limits: int | None) -> int | None:
    """The tenant layer's limit: the tenant's, lowered by what its plan asked for its own tasks."""
    return min((limit for limit in limits if limit is not None), default=None)


def sampled(task_id: str, rate: float) -> bool:
    """Whether a task is in a template's review sample: a stable draw from its id, so every run
    and every worker draws the same."""
    draw = int(hashlib.sha256(task_id.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return draw < rate


def review_policy(plan: PlanSpec, task: Task) -> ReviewPolicy | None:
    """The review the plan asks of this task's template; None when it asks for none."""
    template = plan.template(task.template_id)
    mode = template.review if template else None
    if mode is None or mode is ReviewMode.OFF:
        return None
    required = mode is ReviewMode.REQUIRED or sampled(task.id, template.sample_rate or 0.0)
    return _policy(plan, required=required)


def checks_policy(plan: PlanSpec, task: Task) -> ReviewPolicy | None:
    """The automatic checks that gate success for a template without review (black, frozen, duration,
    ratio; not silence, which only a reviewer weighs); None when the template has review."""
    if review_policy(plan, task) is not None:
        return None
    return _policy(plan, required=False).model_copy(update={"audio_expected": False})


def _policy(plan: PlanSpec, *, required: bool) -> ReviewPolicy:
    settings = plan.review or ReviewSettings()
    return ReviewPolicy(required=required, deadline_s=settings.deadline_hours * 3600, on_deadline=settings.on_deadline,
                        duration_tolerance_s=settings.duration_tolerance_s, audio_expected=settings.audio_expected,
                        max_black_ratio=settings.max_black_ratio, max_frozen_ratio=settings.max_frozen_ratio,
                        on_failed_checks=settings.on_failed_checks or "review")


def apply_transition(session: Session, req: TransitionInput) -> task_store.TransitionOutcome:
    """One state-machine event in the caller's transaction (record_transition's, or that of an activity
    whose own write the move follows: transition-in-work-v1); idempotent per source_event_id."""
    if req.event is TaskEvent.PROVIDER_RUNNING and (already := quiet_progress.running_already(session, req.task_id)):
        return already  # the gateway recorded it (lean-path-v1's quiet progress)
    updates: dict = {}
    if req.error_class is not None or req.error is not None:
        updates = {"last_error_class": req.error_class, "last_error": req.error}
    if req.cancel_outcome is not None:
        updates["cancel_outcome"] = req.cancel_outcome
    updates["next_retry_at"] = req.next_retry_at  # set while RETRY_WAIT, cleared by any other move
    if req.prompt_override is not None:
        updates["prompt_override"] = req.prompt_override
    if req.deadline_at is not None:
        updates["deadline_at"] = req.deadline_at
    payload = dict(req.payload)
    if req.error:
        payload.setdefault("error", req.error)
    return task_store.transition(session, req.task_id, req.event, source=req.source,
                                 source_event_id=req.source_event_id, attempt_no=req.attempt_no, payload=payload,
                                 task_updates=updates)


Applied = list[tuple[TransitionInput, task_store.TransitionOutcome]]  # moves applied in one transaction


def apply_moves(session: Session, moves: list[TransitionInput]) -> Applied:
    """A request's moves in order, in the caller's transaction; one the table refuses ends the list
    (the workflow then stops as after a refused record_transition)."""
    done: Applied = []
    for req in moves:
        done.append((req, apply_transition(session, req)))
        if not done[-1][1].applied:
            break
    return done


def moved(done: Applied) -> list[TransitionResult]:
    """After the caller's commit: the moves' metrics, and their results for the workflow."""
    for req, out in done:
        _observe(req, out)
    return [TransitionResult(applied=out.applied, status=out.status, version=out.version) for _, out in done]


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


def route_problem(name: str, provider: VideoProvider | None, model: str, duration_s: float,
                  aspect_ratio: str) -> str | None:
    """Why `provider` cannot make this video (model, duration, ratio, configuration), or None. The
    API refuses such a create at once; an imported task ends INVALID at validation."""
    if provider is None:
        return f"no adapter for provider {name!r}"
    missing = getattr(provider, "missing_setting", None)  # hosted providers need a key
    if missing:
        return (f"{name} is not configured: set {missing} "
                "(or point it at the emulator with `reelqueue dev up --emulate-providers`)")
    caps = provider.capabilities
    if caps.models is not None and model not in caps.models:
        return (f"{name} has no model {model!r} (known: {', '.join(caps.models)}; a price in "
                f"REELQUEUE_{name.upper()}_PRICES adds one)")
    if caps.durations_s is not None and duration_s not in caps.durations_s:
        return f"{name} offers durations {caps.durations_s} s, not {duration_s:g} s"
    if aspect_ratio not in caps.aspect_ratios:
        return f"{name} does not render {aspect_ratio}"
    if not caps.min_duration_s <= duration_s <= caps.max_duration_s:
        return f"duration {duration_s:g}s outside {caps.min_duration_s}-{caps.max_duration_s}s"
    return None


# Validation failures whose cause an operator can fix without a new import (a provider's key set, an
# image host back): `reelqueue retry --status INVALID` validates these tasks again. The markers are
# the reasons route_problem, _store_image and _invalid_reason give for those causes.
REVALIDATABLE_MARKS = ("is not configured: set ", "input image not stored", "no input image stored",
                       "missing or changed in storage")


def revalidatable(reason: str | None) -> bool:
    """Whether an INVALID task's reason names a cause that can change (see REVALIDATABLE_MARKS)."""
    return reason is not None and any(mark in reason for mark in REVALIDATABLE_MARKS)


def _invalid_reason(
    task: Task, provider: VideoProvider | None, image: Asset | None, storage: ObjectStorage
) -> str | None:
    route = route_problem(task.provider, provider, task.model, float(task.duration_s), task.aspect_ratio)
    if route:
        return route
    if not task.prompt.strip():
        return "empty prompt"
    if image is None:
        return "no input image stored for this task"
    stored = storage.stat(image.key)
    if stored is None or stored.sha256 != image.sha256:
        return f"input image {image.key} missing or changed in storage"
    return None

