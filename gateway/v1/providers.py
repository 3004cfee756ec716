"""`GET /v1/providers`: the routes a tenant may ask a generation for (providers this gateway can
use, their models, durations and ratios), so a client offers only what a create accepts."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel

from gateway.deps import GatewayDeps, gateway_deps
from gateway.tenancy import TenantDep

router = APIRouter(tags=["providers"])


class ProviderOut(BaseModel):
    name: str
    models: list[str] | None  # None: any model name
    aspect_ratios: list[str]
    min_duration_s: float
    max_duration_s: float
    durations_s: list[float] | None  # the only durations offered (None: any in min..max)


@router.get("/providers", response_model=list[ProviderOut])
def providers(_: TenantDep, deps: Annotated[GatewayDeps, Depends(gateway_deps)]) -> list[ProviderOut]:
    """Configured providers only (a hosted one without its key is left out), by name."""
    out = []
    for name, provider in sorted(deps.providers.items()):
        if getattr(provider, "missing_setting", None):
            continue
        caps = provider.capabilities
        out.append(ProviderOut(name=name, models=caps.models, aspect_ratios=caps.aspect_ratios,
                               min_duration_s=caps.min_duration_s, max_duration_s=caps.max_duration_s,
                               durations_s=caps.durations_s))
    return out
