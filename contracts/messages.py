"""Inputs and results passed between the workflow and its activities (one model per call).

Pure pydantic, no I/O imports: the workflow sandbox imports this module. Only ids, keys and small
facts travel through Temporal history, never media bytes (payloads fail at 2 MB).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field

from contracts.admission import PlanLimits, PriorityClass, SlotRelease, SlotRenewal
from contracts.provider import TERMINAL_JOB_STATUSES, ErrorClass, JobStatus, SubmitOutcome
from contracts.routing import Route, RouteChoice
from contracts.task import TaskEvent, TaskStatus


class GenerationInput(BaseModel):
    task_id: str
    run: int = 1  # 1 for the first run; `reelqueue retry` starts run n+1 of a task that ended


def run_suffix(run: int) -> str:
    """What tells run n of a task apart in its keys (ledger, state events); empty for run 1."""
    return "" if run == 1 else f":run{run}"


class CancelRequest(BaseModel):
    """Input of the `cancel` signal; a Temporal cancellation becomes one of these too."""

    reason: str = "requested by user"
    requested_by: str = "cli"


class PauseRequest(BaseModel):
    """Input of the `pause` signal: the task's import was paused (or resumed, `paused` False) by `by`."""

    paused: bool
    by: str


class LiveDetails(BaseModel):
    """What a running task is doing now: the `details` query, and (as `text`) the Web UI's current
    details. `position` is filled by whoever asks the provider's gate (`reelqueue show`)."""

    status: str
    step: str  # starting, validating, waiting_for_slot, paused, submitting, following_job, retry_wait,
    #            fetching, transcoding, checking, waiting_for_person, settling, ended
    text: str
    since: datetime | None = None  # when the current step began
    provider: str | None = None
    attempt_no: int | None = None
    job_id: str | None = None
    job_status: str | None = None
    progress: float | None = None
    waiting_for: str | None = None  # why a person is needed (evidence), or who paused the import
    position: int | None = None


class ResolveAction(StrEnum):
    RETRY = "retry"  # run the stuck step again (poll, reconcile, cancel, stray)
    # Give up on an unknown submit and submit anew; or book a duplicate job the provider refuses to
    # answer for at the task's estimate (its cost unknown) and let the task end as it was going to.
    ACCEPT_DUPLICATE_RISK = "accept_duplicate_risk"
    FAIL = "fail"  # end the task FAILED_FINAL; known live jobs are cancelled first


class ResolveRequest(BaseModel):
    """Input of the `resolve` update: an operator's decision on a NEEDS_ATTENTION task."""

    action: ResolveAction
    reason: str = ""
    by: str = "operator"


class ResolveResult(BaseModel):
    status: TaskStatus
    message: str


class ReviewAction(StrEnum):
    APPROVE = "approve"  # SUCCEEDED
    REJECT = "reject"  # REJECTED, with a reason
    REGENERATE = "regenerate"  # a new paid attempt (within the budget), maybe with an edited prompt


class ReviewRequest(BaseModel):
    """Input of the `review` update: a reviewer's decision on a task in REVIEW."""

    action: ReviewAction
    by: str = Field(min_length=1, max_length=200)
    reason: str = Field(default="", max_length=2000)
    prompt: str | None = Field(default=None, max_length=2000)  # regenerate: the edited prompt


class ReviewResult(BaseModel):
    status: TaskStatus
    message: str


class ReviewPolicy(BaseModel):
    """What the plan says about reviewing one task (None in TaskInfo: no review)."""

    required: bool  # review = "required", or "sample" and this task was drawn
    deadline_s: float
    on_deadline: str  # "expire" | "approve"
    duration_tolerance_s: float
    audio_expected: bool
    max_black_ratio: float
    max_frozen_ratio: float
    # A template without review whose video fails a check (checks-gate-success-v1): "review" sends it to
    # REVIEW after one regeneration, "fail" ends it FAILED_FINAL naming the check.
    on_failed_checks: str = "review"


class CheckInput(BaseModel):
    """The automatic checks of one proxy rendition, with the plan's expectations."""

    task_id: str
    attempt_no: int
    proxy_asset_id: str
    aspect_ratio: str
    duration_s: float
    policy: ReviewPolicy


class CheckOutcome(BaseModel):
    name: str  # duration / black / frozen / silence / ratio
    passed: bool
    detail: str


class CheckResult(BaseModel):
    passed: bool
    checks: list[CheckOutcome]


class ProviderUpdate(BaseModel):
    """One provider observation of a job from a webhook, normalized by the provider's adapter.

    `verified` says the provider signed it (Standard Webhooks, fal's ed25519): the workflow may
    move the task on it. An unsigned one is only a hint: the workflow confirms it with a status
    call before any transition. `observed_at` is the provider's own timestamp when it gives one.
    """

    job_id: str
    status: JobStatus | None = None
    raw_status: str | None = None
    progress: float | None = None
    event_id: str | None = None  # the webhook id: the same event twice is one observation
    observed_at: datetime | None = None
    verified: bool = False


class TaskRef(BaseModel):
    task_id: str
    run: int = 1
    # transition-in-work-v1: moves the workflow decided, committed by the activity in its own transaction
    # (in order; one the table refuses stops the rest). reserve_credit takes them.
    moves: list[TransitionInput] = Field(default_factory=list)
    # reserve_credit: hold one more job's estimate for this attempt, beside the task's reservation (the
    # regeneration of a video that failed its checks, checks-gate-success-v1); closed with it by settle
    hold_for_attempt: int | None = None
    hold: Literal["regeneration", "risk"] = "regeneration"  # why (schema.ledger_keys.Hold): the key says it


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
    deadline_s: float  # how long one provider job may run before it is cancelled (EXPIRED)
    current_attempt_no: int
    task_deadline_s: float = 86_400.0  # bounds every wait and retry of the task: admission, refusals
    plan_limits: PlanLimits | None = None  # the plan's admission limits for this provider
    review: ReviewPolicy | None = None  # the template asks for review ("required" or "sample")
    # The automatic checks of a template without review (checks-gate-success-v1): success needs them passed
    checks: ReviewPolicy | None = None
    tenant_max_concurrent: int | None = None  # the tenant's concurrency (its gate); None: no tenant layer
    platform_max_concurrent: int | None = None  # jobs at once platform-wide (its gate); None: no platform layer
    model_max_concurrent: int | None = None  # jobs at once of the task's provider and model; None: no model layer
    priority: PriorityClass | None = None  # its line at every gate (None: a task from before priority classes)
    paused_by: str | None = None  # the task's import is paused (import-pause-v1): who paused it
    # The routes its template accepts, the primary first (route-fallback-v1); empty: the primary alone
    routes: list[Route] = Field(default_factory=list)
    lock_model: bool = False  # the template forbids any route but the primary


class RouteFields(BaseModel):
    """The task facts that depend on its route: what the workflow takes over when the route changes."""

    provider: str
    model: str
    min_poll_interval_s: float
    plan_limits: PlanLimits | None = None
    model_max_concurrent: int | None = None


class RouteRequest(BaseModel):
    """Choose the route of the task's next paid attempt (route-fallback-v1)."""

    task_id: str
    run: int = 1
    attempt_no: int  # the attempt the route is for (names the top-up RESERVE when the route is dearer)
    current: Route  # the route the task is on now
    job_may_exist: bool = False  # a job of the task may still exist on `current`: it keeps it
    take: bool = True  # False: only say which route would be chosen now (a task waiting in a gate's line)


class RouteTaken(BaseModel):
    choice: RouteChoice
    fields: RouteFields  # the task's facts on the chosen route


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
    next_retry_at: datetime | None = None  # RETRY_WAIT: when the next attempt is due (shown by `show`)
    prompt_override: str | None = None  # a reviewer's edited prompt for the next attempts
    deadline_at: datetime | None = None  # the task deadline, recorded for `ledger check` (set on QUEUED)

    def with_facts(self, **facts: Any) -> TransitionInput:
        """The move with what the step found out added to its payload (a job id, an output's key):
        the same whether the step commits it or the workflow records it on its own."""
        return self.model_copy(update={"payload": {**self.payload, **facts}})


class TransitionResult(BaseModel):
    applied: bool
    status: TaskStatus
    version: int


class AttemptRef(BaseModel):
    task_id: str
    attempt_no: int
    # transition-in-work-v2 (submit only): `moves` are committed by transaction A with the intent (the task
    # becomes DISPATCHING), `accepted` by transaction B when the provider took the submit (with its job id)
    moves: list[TransitionInput] = Field(default_factory=list)
    accepted: TransitionInput | None = None
    # renew-in-submit-v1: the renewal the gate `gate_id` gets once the provider accepted (its AIMD increase),
    # sent by the step after transaction B
    gate_id: str | None = None
    renewal: SlotRenewal | None = None
    route_note: str | None = None  # the route chosen for the attempt and why others were not (route-fallback-v1)


class SubmitActivityResult(BaseModel):
    outcome: SubmitOutcome
    job_id: str | None = None
    error_class: ErrorClass | None = None
    error: str | None = None
    retry_after_s: float | None = None
    webhooks: bool = False  # the submit asked the provider for webhooks: polling becomes a safety net
    # Webhooks that arrived before the job id was saved (orphans), matched once it was.
    early_updates: list[ProviderUpdate] = Field(default_factory=list)
    failure: str | None = None  # what the provider's breaker counts of this call (contracts.admission.submit_failure)
    moved: list[TransitionResult] = Field(default_factory=list)  # the request's `moves`, then `accepted`
    renewed: bool = False  # the step told the gate of the acceptance (the request's `renewal`)


class ReconcileOutcome(StrEnum):
    FOUND = "found"  # the provider holds a job for our submit: follow it
    ABSENT = "absent"  # the provider's authoritative answer, after its acceptance window
    NOT_ASKABLE = "not_askable"  # the provider has no lookup: a person decides


class ReconcileResult(BaseModel):
    outcome: ReconcileOutcome
    job_id: str | None = None
    duplicates: list[str] = Field(default_factory=list)  # more jobs for one submit: extra charges
    evidence: str = ""
    early_updates: list[ProviderUpdate] = Field(default_factory=list)  # its webhooks kept as orphans


class JobRef(BaseModel):
    task_id: str
    attempt_no: int
    job_id: str
    # transition-in-work-v2: fetch_output commits `moves` with the output's asset row (adding its key and
    # sha256); poll_job commits the move for the status it observed with the attempt's row
    moves: list[TransitionInput] = Field(default_factory=list)
    move_on: dict[JobStatus, TransitionInput] = Field(default_factory=dict)
    # release-in-step-v1 (poll_job only): the slot's release the gate `gate_id` gets, sent by the step once it
    # observed the job terminal (after its transaction), instead of by a workflow task of its own
    gate_id: str | None = None
    release: SlotRelease | None = None


class PollResult(BaseModel):
    status: JobStatus
    raw_status: str
    progress: float | None = None
    cost: float | None = None
    error_class: ErrorClass | None = None
    error: str | None = None
    output_expires_at: datetime | None = None  # when the provider's output URL expires (a job that succeeded)
    moved: list[TransitionResult] = Field(default_factory=list)  # what became of the request's `move_on`
    released: bool = False  # the step gave the slot back at the gate (the request's `release`)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_JOB_STATUSES


class StrayJobRef(BaseModel):
    """A provider job beyond the one an attempt follows (a duplicate): cancelled and costed."""

    task_id: str
    attempt_no: int
    job_id: str


class StrayJobResult(BaseModel):
    status: JobStatus
    cost: float


class StrayCostAcceptance(BaseModel):
    """A person's decision on a duplicate job the provider refuses to answer for: its cost is
    booked as unknown (the task's estimate for one job), with who and why."""

    stray: StrayJobRef
    by: str
    reason: str = ""


class AssetRef(BaseModel):
    asset_id: str
    kind: str
    key: str
    sha256: str
    size: int


class FetchedAsset(AssetRef):
    """fetch_output's result: the raw output's asset, and what became of the request's `moves`."""

    moved: list[TransitionResult] = Field(default_factory=list)


class TranscodeInput(BaseModel):
    task_id: str
    raw_asset_id: str


class TranscodeResult(BaseModel):
    proxy: AssetRef
    hls: AssetRef
    thumbnail: AssetRef


class RenditionProfile(StrEnum):
    PROXY = "PROXY"  # the MP4 a task needs to succeed
    HLS = "HLS"
    THUMBNAIL = "THUMBNAIL"


class RenditionStatus(StrEnum):
    READY = "READY"
    FAILED = "FAILED"  # recorded with its error; a later run of the renditions step retries it


class RenditionOut(BaseModel):
    profile: RenditionProfile
    status: RenditionStatus
    asset: AssetRef | None = None
    error: str | None = None


class RenditionsResult(BaseModel):
    """HLS and thumbnail as they stand after one run of the renditions step."""

    renditions: list[RenditionOut]

    def summary(self) -> dict[str, str]:
        return {r.profile.value: r.status.value for r in self.renditions}


class SettleInput(BaseModel):
    task_id: str
    run: int = 1
    attempt_no: int | None = None
    cost: float  # what the provider charged for the task's attempts (0: release everything)
    reason: str = ""
    # The reservation was closed when the task entered REVIEW: `cost` is what attempts made since
    # (a reviewer's regenerate) charged, booked as an ADJUSTMENT of `attempt_no`.
    after_review: bool = False
    # transition-in-work-v2: the move that ends the task, committed in the transaction that closes the ledger
    moves: list[TransitionInput] = Field(default_factory=list)


class LedgerResult(BaseModel):
    reserved: float
    settled: float
    released: float
    adjusted: float = 0.0
    moved: list[TransitionResult] = Field(default_factory=list)  # what became of the request's `moves`


class GenerationOutcome(BaseModel):
    task_id: str
    status: TaskStatus
    attempts: int
    cost: float
    error: str | None = None


# -- lean-path-v1: the prepare step and the media step --------------------------------------------------


class PrepareResult(ValidationResult):
    """prepare_task's answer: the validation, the reservation and the moves to QUEUED in one step.
    `credit_short` (the tenant's credit cannot hold the estimate) is an answer, not a failure;
    `task_deadline_at` is the deadline recorded with QUEUED (None when the task did not get there)."""

    credit_short: str | None = None
    task_deadline_at: datetime | None = None
    moved: list[TransitionResult] = Field(default_factory=list)


class MediaChecks(BaseModel):
    """The automatic checks the media step runs on the proxy it made (the plan's expectations)."""

    aspect_ratio: str
    duration_s: float
    policy: ReviewPolicy


class MediaStepInput(BaseModel):
    """make_media: proxy, HLS, thumbnail and the automatic checks of one raw output, downloaded once.
    With `close`, the step also settles the ledger and commits the task's ending (the settle request's
    move) in its last transaction, when the checks passed and no duplicate job of the task is open."""

    task_id: str
    attempt_no: int
    raw_asset_id: str
    checks: MediaChecks | None = None
    close: SettleInput | None = None


class MediaStepResult(BaseModel):
    proxy: AssetRef
    renditions: dict[str, str]  # profile -> READY / FAILED (a failure stays recorded on its row)
    checks: CheckResult | None = None
    closed: LedgerResult | None = None  # the ledger as the step closed it; None: the workflow closes it
