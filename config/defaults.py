"""Configured values that the lower layers need without loading the settings (config/settings.py
reads the environment, secret files and stack.json): the default task queue, and the admission
models the settings parse. Pure pydantic: the workflow sandbox imports it through contracts/.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

DEFAULT_TASK_QUEUE = "reelqueue-generation"  # REELQUEUE_TASK_QUEUE; gate ids leave it out (contracts.workflow_api)


class ProviderLimits(BaseModel):
    """How much of a provider one tenant may use at once (configuration, lowered by a plan)."""

    max_concurrent: int = Field(default=20, ge=1)  # jobs alive at the provider
    submits_per_minute: int | None = Field(default=None, ge=1)
    # Status calls per second to the provider, shared by every worker (schema/poll_budget.py); None:
    # no budget (the workflows' poll cadence alone paces them). Server configuration only.
    polls_per_second: float | None = Field(default=None, gt=0, le=1000)


class BreakerPolicy(BaseModel):
    """When a provider's gate stops granting slots for new submits (docs/architecture.md, "Provider
    breaker"): `failures` submit failures within `window_s`, making at least `failure_ratio` of the
    submits answered in it, open it for `cooldown_s`; then one probe submit decides."""

    failures: int = Field(default=5, ge=1)
    failure_ratio: float = Field(default=0.5, gt=0, le=1)
    window_s: float = Field(default=60.0, gt=0)
    cooldown_s: float = Field(default=30.0, gt=0)
