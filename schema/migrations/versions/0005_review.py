"""human review: automatic checks per proxy rendition, a reviewer's edited prompt on the task

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tasks", sa.Column("prompt_override", sa.Text(), nullable=True))
    op.create_table(
        "review_checks",
        sa.Column("id", sa.BigInteger(), autoincrement=True, primary_key=True),
        sa.Column("task_id", sa.String(length=64), sa.ForeignKey("tasks.id"), nullable=False),
        sa.Column("attempt_no", sa.Integer(), nullable=False),
        sa.Column("asset_id", sa.String(length=64), sa.ForeignKey("assets.id"), nullable=False),
        sa.Column("passed", sa.Boolean(), nullable=False),
        sa.Column("results", postgresql.JSONB(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.UniqueConstraint("asset_id", name="uq_review_checks_asset"),
    )
    op.create_index("ix_review_checks_task_id", "review_checks", ["task_id"])


def downgrade() -> None:
    op.drop_index("ix_review_checks_task_id", table_name="review_checks")
    op.drop_table("review_checks")
    op.drop_column("tasks", "prompt_override")
