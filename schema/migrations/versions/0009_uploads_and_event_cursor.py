"""uploads through presigned URLs, and a commit-safe cursor over state events

- `uploads`: one row per `POST /v1/uploads` (an asset on its way in): the tenant, what the client
  declared (name, size, type, sha256), the quarantine key the server chose, the multipart upload
  id for large files, status PENDING -> VALIDATING -> READY | REJECTED with a reason, and the
  `assets` row of the validated bytes once READY;
- `state_events.xid`: the id of the transaction that wrote the event (`pg_current_xact_id()`).
  `GET /v1/events` resumes from Postgres snapshots, not from the event id alone: ids are taken
  before commit, so a smaller id can become visible after a larger one (gateway/v1/events.py).
  Added without a value for old rows (no table rewrite); they count as committed long ago.

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "uploads",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("tenant_id", sa.String(64), sa.ForeignKey("tenants.id"), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("filename", sa.String(255), nullable=False),
        sa.Column("declared_size", sa.BigInteger(), nullable=False),
        sa.Column("declared_type", sa.String(100), nullable=False),
        sa.Column("declared_sha256", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("quarantine_key", sa.String(500), nullable=False),
        sa.Column("multipart_upload_id", sa.String(1024), nullable=True),
        sa.Column("part_size", sa.BigInteger(), nullable=True),
        sa.Column("asset_id", sa.String(64), sa.ForeignKey("assets.id"), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.CheckConstraint("status IN ('PENDING','VALIDATING','READY','REJECTED')", name="ck_uploads_status"),
        sa.CheckConstraint("kind IN ('IMAGE','VIDEO','CATALOG')", name="ck_uploads_kind"),
        sa.CheckConstraint("declared_size > 0", name="ck_uploads_size"),
    )
    op.create_index("ix_uploads_tenant", "uploads", ["tenant_id", "created_at"])
    op.create_index("ix_uploads_open", "uploads", ["expires_at"],
                    postgresql_where=sa.text("status IN ('PENDING','VALIDATING')"))
    op.execute("ALTER TABLE state_events ADD COLUMN xid xid8")
    op.execute("ALTER TABLE state_events ALTER COLUMN xid SET DEFAULT pg_current_xact_id()")
    op.execute("CREATE INDEX ix_state_events_xid ON state_events (xid)")


def downgrade() -> None:
    op.execute("DROP INDEX ix_state_events_xid")
    op.execute("ALTER TABLE state_events DROP COLUMN xid")
    op.drop_index("ix_uploads_open", table_name="uploads")
    op.drop_index("ix_uploads_tenant", table_name="uploads")
    op.drop_table("uploads")
