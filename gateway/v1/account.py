"""`GET /v1/me`: who the key belongs to, the tenant's limits and the credit it has left."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel

from activities.ledger import available_credit
from gateway.deps import GatewayDeps, gateway_deps
from gateway.tenancy import TenantDep
from schema.models import Tenant

router = APIRouter(tags=["account"])


class Account(BaseModel):
    tenant_id: str
    key_id: str
    credit_limit: float
    credit_available: float
    max_concurrent: int | None
    rate_per_minute: int


@router.get("/me", response_model=Account)
def me(principal: TenantDep, deps: Annotated[GatewayDeps, Depends(gateway_deps)]) -> Account:
    with deps.db.transaction() as session:
        tenant = session.get(Tenant, principal.tenant_id)
        available = available_credit(session, principal.tenant_id, lock=False)
    return Account(tenant_id=tenant.id, key_id=principal.key_id, credit_limit=float(tenant.credit_limit),
                   credit_available=float(available), max_concurrent=tenant.max_concurrent,
                   rate_per_minute=tenant.rate_per_minute)
