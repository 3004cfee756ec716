"""Messages and state of provider admission (workflows/provider_gate.py): pure pydantic, no I/O.

The configured side (ProviderLimits, BreakerPolicy) lives in config/defaults.py, which the settings
parse; a plan's PlanLimits and everything the gate sends and keeps live here."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from config.defaults import BreakerPolicy, ProviderLimits
from contracts.provider import SubmitOutcome

MAX_LIMIT = 10_000  # slots; submits per minute at most 100 times that


class PlanLimits(BaseModel):
    """What an operator plan's `[providers.NAME]` asks for; an unset field keeps the configured value."""

    model_config = ConfigDict(extra="forbid")
    max_concurrent: int | None = Field(default=None, ge=1, le=MAX_LIMIT)
    submits_per_minute: int | None = Field(default=None, ge=1, le=MAX_LIMIT * 100)


class OwnLimits(BaseModel):
    """What a tenant's plan asks for its own tasks of one provider (`[providers.NAME]` of a plan sent
    to /v1/imports): fewer of the tenant's slots, in the tenant's own admission layer, never a change
    of the provider's shared gate."""

    model_config = ConfigDict(extra="forbid")
    max_concurrent: int = Field(ge=1, le=MAX_LIMIT)


def effective_limits(configured: ProviderLimits | None, plan: PlanLimits | None) -> ProviderLimits:
    """The configuration is the account's ceiling; a plan may ask for less, never for more.

    With nothing configured for the provider the plan's values apply, else the defaults.
    """
    base = configured or ProviderLimits()
    if plan is None:
        return base
    concurrent = plan.max_concurrent or base.max_concurrent
    per_minute = plan.submits_per_minute or base.submits_per_minute
    if configured is not None:
        concurrent = min(concurrent, configured.max_concurrent)
        if configured.submits_per_minute is not None:
            per_minute = min(per_minute or configured.submits_per_minute, configured.submits_per_minute)
    return ProviderLimits(max_concurrent=concurrent, submits_per_minute=per_minute)


class BreakerMode(StrEnum):
    CLOSED = "closed"  # slots are granted as capacity allows
    OPEN = "open"  # no slot for a new submit until the cool-down ends
    HALF_OPEN = "half_open"  # one slot (the probe) at a time; its submit's outcome closes or re-opens


class BreakerState(BaseModel):
    """A provider breaker, carried across the gate's continue-as-new (workflows/breaker.py moves it)."""

    mode: BreakerMode = BreakerMode.CLOSED
    outcomes: list[tuple[datetime, bool]] = Field(default_factory=list)  # (when, failed) of submits in the window
    open_until: datetime | None = None
    probe: str | None = None  # half-open: the workflow holding the probe's slot
    opens: int = 0  # times it opened (re-opens included)
    last_failure: str | None = None


def submit_failure(outcome: SubmitOutcome, http_status: int | None) -> str | None:
    """What the breaker counts against a provider from one submit call: a 5xx, a timeout (sent, no
    answer), no connection. None for an answer that says the provider works: accepted, or refused
    by its rules (429, validation)."""
    if http_status is not None and http_status >= 500:
        return f"http_{http_status}"
    if http_status == 408 or (outcome is SubmitOutcome.UNKNOWN and http_status is None):
        return "timeout"
    if outcome is SubmitOutcome.REJECTED_RETRYABLE and http_status is None:
        return "unreachable"
    return None


class PriorityClass(StrEnum):
    """Which line a task's requests join at every gate: an interactive request (a tenant API's
    generation) goes before bulk work (imports) that asked less than the gate's BULK_LAG before it."""

    INTERACTIVE = "interactive"
    BULK = "bulk"


class SlotRequest(BaseModel):
    workflow_id: str
    task_id: str
    requested_at: datetime | None = None  # when the task first asked
    priority: PriorityClass | None = None  # None: as interactive (tasks from before priority classes)
    place: datetime | None = None  # set by the gate (gate-priority-v1): its place in line, requested_at if None
    limit: int | None = None  # the configured limits at the time of asking (the latest wins)
    submits_per_minute: int | None = None
    breaker: BreakerPolicy | None = None  # the configured breaker at the time of asking (the latest wins)


class SlotGrant(BaseModel):
    token: int  # fencing token: releases and renewals must name it
    gate: str | None = None  # the gate that granted it (its GateInput.provider); None from gates before it said


class SlotRelease(BaseModel):
    workflow_id: str
    token: int | None = None  # None: withdraw a request that was never granted
    throttled: bool = False  # the provider refused before accepting (429, queue full)
    retry_after_s: float | None = None
    failure: str | None = None  # the submit under this slot failed as the breaker counts (submit_failure)


class SlotRenewal(BaseModel):
    workflow_id: str
    token: int
    accepted: bool = False  # the provider accepted a submit under this slot (AIMD increase)
    failure: str | None = None  # the submit under this slot (still held: its outcome is unknown) failed


class Holder(BaseModel):
    token: int
    expires_at: datetime
    accepted: bool = False  # gate-renew-once-v1: its submit's acceptance was counted (AIMD), once


class GateState(BaseModel):
    """Everything the gate carries across continue-as-new."""

    effective: float = 1.0
    next_token: int = 1
    holders: dict[str, Holder] = Field(default_factory=dict)
    queue: list[SlotRequest] = Field(default_factory=list)
    regrant: list[str] = Field(default_factory=list)
    paused_until: datetime | None = None
    recent_grants: list[datetime] = Field(default_factory=list)
    throttles: int = 0
    round_from_token: int = 0  # gate-aimd-v2: refusals of older tokens halve the limit no more
    breaker: BreakerState = Field(default_factory=BreakerState)


class GateInput(BaseModel):
    provider: str
    limit: int
    submits_per_minute: int | None = None
    lease_s: float = Field(default=900.0, gt=0)  # how often a silent holder is checked for life
    state: GateState | None = None
    grant_signal: str | None = None  # the signal a grant is sent as (None: slot_granted; a tenant gate's own)
    breaker: BreakerPolicy | None = None  # None: the defaults


class GateSnapshot(BaseModel):
    limit: int
    effective: int
    in_use: int
    waiting: int
    oldest_wait_s: float
    granted: int
    throttles: int
    paused_until: datetime | None = None
    breaker: BreakerMode = BreakerMode.CLOSED
    breaker_failures: int = 0  # submit failures in the current window (closed)
    breaker_open_until: datetime | None = None  # open: when the probe may go
    breaker_opens: int = 0
    breaker_probe_out: bool = False  # half-open: its one probe's submit is out (routing skips it meanwhile)


class AdmissionInput(BaseModel):
    """What a generation task sends to ask its provider's gate for a slot."""

    provider: str
    request: SlotRequest
    plan_limits: PlanLimits | None = None  # the task's plan `[providers.NAME]`, merged with configuration
    grant_signal: str | None = None  # a tenant gate's grant signal (None: the provider gate's)
    # grant-at-once-v1: ask with the gate's `ask` update, whose answer is the slot when one is free now
    at_once: bool = False
