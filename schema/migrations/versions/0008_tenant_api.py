"""tenant API: hashed API keys, tenant limits, idempotency records, the start outbox, rate windows

- `tenants` gets the limits the API enforces per tenant: `max_concurrent` (tasks past admission at
  once) and `rate_per_minute` (requests at the front door);
- `api_keys`: one row per key, only its sha256 stored (the key is printed once), revocable;
- `idempotency_keys`: (tenant, Idempotency-Key) -> the request's hash, its task and the first answer,
  written in the create transaction; the primary key is the last line against duplicates;
- `task_outbox`: a task the API committed whose workflow may not be started yet; the worker's sweeper
  starts what the gateway did not (Temporal's workflow-id uniqueness deduplicates);
- `tenant_rate_windows`: one counter row per tenant (fixed one-minute window).

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def _now() -> sa.Column:
    return sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False)


def upgrade() -> None:
    op.add_column("tenants", sa.Column("max_concurrent", sa.Integer(), nullable=False, server_default=sa.text("10")))
    op.add_column("tenants", sa.Column("rate_per_minute", sa.Integer(), nullable=False,
                                       server_default=sa.text("600")))
    op.create_check_constraint("ck_tenants_limits", "tenants", "max_concurrent >= 1 AND rate_per_minute >= 1")
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(length=40), primary_key=True),
        sa.Column("tenant_id", sa.String(length=64), sa.ForeignKey("tenants.id"), nullable=False, index=True),
        sa.Column("key_sha256", sa.String(length=64), nullable=False, unique=True),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        _now(),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_table(
        "idempotency_keys",
        sa.Column("tenant_id", sa.String(length=64), sa.ForeignKey("tenants.id"), primary_key=True),
        sa.Column("key", sa.String(length=255), primary_key=True),
        sa.Column("request_sha256", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=64), sa.ForeignKey("tasks.id"), nullable=False),
        sa.Column("response_status", sa.Integer(), nullable=False),
        sa.Column("response_body", JSONB(), nullable=False),
        _now(),
    )
    op.create_table(
        "task_outbox",
        sa.Column("task_id", sa.String(length=64), sa.ForeignKey("tasks.id"), primary_key=True),
        sa.Column("tenant_id", sa.String(length=64), sa.ForeignKey("tenants.id"), nullable=False),
        _now(),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_task_outbox_pending", "task_outbox", ["created_at"],
                    postgresql_where=sa.text("started_at IS NULL"))
    op.create_table(
        "tenant_rate_windows",
        sa.Column("tenant_id", sa.String(length=64), sa.ForeignKey("tenants.id"), primary_key=True),
        sa.Column("window_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("tenant_rate_windows")
    op.drop_index("ix_task_outbox_pending", "task_outbox")
    op.drop_table("task_outbox")
    op.drop_table("idempotency_keys")
    op.drop_table("api_keys")
    op.drop_constraint("ck_tenants_limits", "tenants", type_="check")
    op.drop_column("tenants", "rate_per_minute")
    op.drop_column("tenants", "max_concurrent")
