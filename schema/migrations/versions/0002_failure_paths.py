"""failure paths: when a submit call ended, the job an adjustment pays for, stray jobs

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("attempts", sa.Column("call_ended_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("credit_ledger", sa.Column("provider_job_id", sa.String(length=256), nullable=True))
    op.create_table(
        "stray_jobs",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("task_id", sa.String(length=64), sa.ForeignKey("tasks.id"), nullable=False),
        sa.Column("attempt_no", sa.Integer(), nullable=False),
        sa.Column("provider", sa.String(length=64), nullable=False),
        sa.Column("provider_job_id", sa.String(length=256), nullable=False),
        sa.Column("found_by", sa.String(length=32), nullable=False),
        sa.Column("provider_status", sa.String(length=32), nullable=True),
        sa.Column("cost", sa.Numeric(precision=20, scale=6), nullable=True),
        sa.Column("accounted", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("provider", "provider_job_id"),
    )
    op.create_index("ix_stray_jobs_task_id", "stray_jobs", ["task_id"])


def downgrade() -> None:
    op.drop_index("ix_stray_jobs_task_id", table_name="stray_jobs")
    op.drop_table("stray_jobs")
    op.drop_column("credit_ledger", "provider_job_id")
    op.drop_column("attempts", "call_ended_at")
