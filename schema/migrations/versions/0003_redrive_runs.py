"""redrive: a task's run number, and the run each ledger row belongs to

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tasks", sa.Column("run_no", sa.Integer(), nullable=False, server_default=sa.text("1")))
    op.add_column("credit_ledger", sa.Column("run_no", sa.Integer(), nullable=False, server_default=sa.text("1")))


def downgrade() -> None:
    op.drop_column("credit_ledger", "run_no")
    op.drop_column("tasks", "run_no")
