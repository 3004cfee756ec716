"""Messages and state of provider admission (workflows/provider_gate.py): pure pydantic, no I/O."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field


class ProviderLimits(BaseModel):
    """How much of a provider one tenant may use at once (configuration, lowered by a plan)."""

    max_concurrent: int = Field(default=20, ge=1)  # jobs alive at the provider
    submits_per_minute: int | None = Field(default=None, ge=1)


class PlanLimits(BaseModel):
    """What a plan's `[providers.NAME]` asks for; an unset field keeps the configured value."""

    model_config = ConfigDict(extra="forbid")
    max_concurrent: int | None = Field(default=None, ge=1)
    submits_per_minute: int | None = Field(default=None, ge=1)


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


class SlotRequest(BaseModel):
    workflow_id: str
    task_id: str
    requested_at: datetime | None = None  # when the task first asked: its place in the queue
    limit: int | None = None  # the configured limits at the time of asking (the latest wins)
    submits_per_minute: int | None = None


class SlotGrant(BaseModel):
    token: int  # fencing token: releases and renewals must name it


class SlotRelease(BaseModel):
    workflow_id: str
    token: int | None = None  # None: withdraw a request that was never granted
    throttled: bool = False  # the provider refused before accepting (429, queue full)
    retry_after_s: float | None = None


class SlotRenewal(BaseModel):
    workflow_id: str
    token: int
    accepted: bool = False  # the provider accepted a submit under this slot (AIMD increase)


class Holder(BaseModel):
    token: int
    expires_at: datetime


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


class GateInput(BaseModel):
    provider: str
    limit: int
    submits_per_minute: int | None = None
    lease_s: float = Field(default=900.0, gt=0)  # how often a silent holder is checked for life
    state: GateState | None = None
    grant_signal: str | None = None  # the signal a grant is sent as (None: slot_granted; a tenant gate's own)


class GateSnapshot(BaseModel):
    limit: int
    effective: int
    in_use: int
    waiting: int
    oldest_wait_s: float
    granted: int
    throttles: int
    paused_until: datetime | None = None


class AdmissionInput(BaseModel):
    """What a generation task sends to ask its provider's gate for a slot."""

    provider: str
    request: SlotRequest
    plan_limits: PlanLimits | None = None  # the task's plan `[providers.NAME]`, merged with configuration
    grant_signal: str | None = None  # a tenant gate's grant signal (None: the provider gate's)
