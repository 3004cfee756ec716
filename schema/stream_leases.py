"""Open `GET /v1/events` streams per tenant, counted where every gateway sees them (migration 0019).

Each gateway process holds a lease (`stream_gateways`, renewed every RENEW_S, expiring after TTL_S)
and, per tenant, the number of streams it holds under it (`stream_leases`). A new stream is let in
when the sum over live leases is below the tenant's cap, checked and written under a transaction
lock of the tenant, so parallel opens on any number of gateways take turns and the cap holds. A
gateway that dies stops renewing: its streams stop counting within TTL_S.
"""

from __future__ import annotations

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

TTL_S = 15.0
RENEW_S = 5.0
FORGET_S = 3600.0  # expired gateways' rows are removed after this long

_RENEW = text("""
INSERT INTO stream_gateways (id, host, expires_at) VALUES (:id, :host, now() + make_interval(secs => :ttl))
ON CONFLICT (id) DO UPDATE SET expires_at = EXCLUDED.expires_at
""")
_OPEN = text("""
SELECT coalesce(sum(l.streams), 0) FROM stream_leases l JOIN stream_gateways g ON g.id = l.gateway_id
 WHERE l.tenant_id = :tenant AND g.expires_at > now()
""")
_ONE_MORE = text("""
INSERT INTO stream_leases (tenant_id, gateway_id, streams) VALUES (:tenant, :id, 1)
ON CONFLICT (tenant_id, gateway_id) DO UPDATE SET streams = stream_leases.streams + 1
""")
_FEWER = text("""
UPDATE stream_leases SET streams = greatest(streams - :ended, 0) WHERE tenant_id = :tenant AND gateway_id = :id
""")
_FORGET = text("DELETE FROM stream_gateways WHERE expires_at < now() - make_interval(secs => :forget)")


def renew(session: Session, gateway_id: str, host: str, *, ttl_s: float = TTL_S) -> None:
    """The gateway's lease, written or extended (its streams count until it expires)."""
    session.execute(_RENEW, {"id": gateway_id, "host": host[:200], "ttl": ttl_s})


def forget_expired(session: Session) -> None:
    """Rows of gateways gone for a long time (their counts stopped counting when they expired)."""
    session.execute(_FORGET, {"forget": FORGET_S})


def take(session: Session, gateway_id: str, host: str, tenant_id: str, cap: int) -> bool:
    """One more stream of `tenant_id` on this gateway if the tenant's streams on every live gateway
    number fewer than `cap`: counted and written under the tenant's transaction lock."""
    session.execute(select(func.pg_advisory_xact_lock(func.hashtextextended(f"event-streams:{tenant_id}", 0))))
    renew(session, gateway_id, host)
    if open_streams(session, tenant_id) >= cap:
        return False
    session.execute(_ONE_MORE, {"tenant": tenant_id, "id": gateway_id})
    return True


def give_back(session: Session, gateway_id: str, tenant_id: str, ended: int = 1) -> None:
    """`ended` streams of the tenant on this gateway are over."""
    session.execute(_FEWER, {"tenant": tenant_id, "id": gateway_id, "ended": ended})


def open_streams(session: Session, tenant_id: str) -> int:
    """The tenant's streams on every live gateway."""
    return session.scalar(_OPEN, {"tenant": tenant_id})
