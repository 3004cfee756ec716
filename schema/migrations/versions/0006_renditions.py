"""renditions: each playable rendition (proxy, HLS, thumbnail) with its own status and error

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "renditions",
        sa.Column("id", sa.String(length=64), primary_key=True),
        sa.Column("tenant_id", sa.String(length=64), sa.ForeignKey("tenants.id"), nullable=False),
        sa.Column("task_id", sa.String(length=64), sa.ForeignKey("tasks.id"), nullable=False),
        sa.Column("raw_asset_id", sa.String(length=64), sa.ForeignKey("assets.id"), nullable=False),
        sa.Column("profile", sa.String(length=20), nullable=False),
        sa.Column("pipeline_version", sa.String(length=20), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("asset_id", sa.String(length=64), sa.ForeignKey("assets.id"), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("error_class", sa.String(length=40), nullable=True),
        sa.Column("verdict", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.UniqueConstraint("raw_asset_id", "profile", "pipeline_version"),
        sa.CheckConstraint("profile IN ('PROXY','HLS','THUMBNAIL')"),
        sa.CheckConstraint("status IN ('READY','FAILED')"),
    )
    op.create_index("ix_renditions_task_id", "renditions", ["task_id"])


def downgrade() -> None:
    op.drop_index("ix_renditions_task_id", table_name="renditions")
    op.drop_table("renditions")
