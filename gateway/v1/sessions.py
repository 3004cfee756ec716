"""`/v1/sessions`: a short-lived browser token for an API key (the studio page at /app holds the
token, never the key), and sign-out. A token is accepted wherever the key is, except here: only a
key issues one, so a page cannot extend its own session."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from gateway.deps import GatewayDeps, gateway_deps
from gateway.problems import ProblemError
from gateway.tenancy import TenantDep, bearer_key
from schema import browser_sessions

router = APIRouter(tags=["sessions"])
DEFAULT_TTL_S = 3600
MAX_TTL_S = 12 * 3600


class SessionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ttl_s: int = Field(default=DEFAULT_TTL_S, ge=60, le=MAX_TTL_S, description="seconds the token lives")


class SessionOut(BaseModel):
    token: str  # send as `Authorization: Bearer <token>`; shown once
    expires_at: datetime
    tenant_id: str
    key_id: str


@router.post("/sessions", status_code=201, response_model=SessionOut)
def create_session(principal: TenantDep, deps: Annotated[GatewayDeps, Depends(gateway_deps)], request: Request,
                   response: Response, body: SessionRequest | None = None) -> SessionOut:
    """Authenticated with the API key itself (a session token is refused: 403 `session-from-session`)."""
    if bearer_key(request).startswith(browser_sessions.TOKEN_PREFIX):
        raise ProblemError(403, "a session is issued for an API key, not for another session",
                           slug="session-from-session")
    ttl = timedelta(seconds=(body or SessionRequest()).ttl_s)
    with deps.db.transaction() as session:
        token, expires_at = browser_sessions.issue(session, principal.key_id, ttl)
    response.headers["Cache-Control"] = "no-store"
    return SessionOut(token=token, expires_at=expires_at, tenant_id=principal.tenant_id, key_id=principal.key_id)


@router.delete("/sessions/current", status_code=204)
def end_session(_: TenantDep, deps: Annotated[GatewayDeps, Depends(gateway_deps)], request: Request) -> Response:
    """Sign-out: the token answers 401 from now on (an API key is not ended here: 400)."""
    token = bearer_key(request)
    if not token.startswith(browser_sessions.TOKEN_PREFIX):
        raise ProblemError(400, "send the session token to end it (keys are revoked with the CLI)",
                           slug="not-a-session")
    with deps.db.transaction() as session:
        browser_sessions.end(session, token)
    return Response(status_code=204)
