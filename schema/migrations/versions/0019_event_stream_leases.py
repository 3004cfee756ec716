"""event_stream_leases: a tenant's open event streams counted where every gateway sees them

`stream_gateways` holds one lease per gateway process (renewed every few seconds, expiring when the
process stops renewing it); `stream_leases` how many streams of a tenant each gateway holds. The cap
of `GET /v1/events` is checked against the sum over live gateways under a lock of the tenant, so it
holds whatever the number of gateways, and a killed gateway's streams stop counting when its lease
expires (schema/stream_leases.py, docs/architecture.md "Live status").

Revision ID: 0019
Revises: 0018
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "stream_gateways",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("host", sa.String(200), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_stream_gateways_expires_at", "stream_gateways", ["expires_at"])
    op.create_table(
        "stream_leases",
        sa.Column("tenant_id", sa.String(64), sa.ForeignKey("tenants.id"), primary_key=True),
        sa.Column("gateway_id", sa.String(40), sa.ForeignKey("stream_gateways.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("streams", sa.Integer(), nullable=False),
    )
    op.create_index("ix_stream_leases_gateway_id", "stream_leases", ["gateway_id"])


def downgrade() -> None:
    op.drop_index("ix_stream_leases_gateway_id", table_name="stream_leases")
    op.drop_table("stream_leases")
    op.drop_index("ix_stream_gateways_expires_at", table_name="stream_gateways")
    op.drop_table("stream_gateways")
