"""stray_jobs for the provider backstop: jobs no task knows (orphans: no task, no attempt), with the
request key and the provider's evidence; credit_ledger ADJUSTMENTs of such a job carry no task

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.alter_column("stray_jobs", "task_id", existing_type=sa.String(64), nullable=True)
    op.alter_column("stray_jobs", "attempt_no", existing_type=sa.Integer(), nullable=True)
    op.add_column("stray_jobs", sa.Column("request_key", sa.String(300), nullable=True))
    op.add_column("stray_jobs", sa.Column("evidence", postgresql.JSONB(), nullable=True))
    op.create_check_constraint("ck_stray_jobs_task", "stray_jobs",
                               "task_id IS NOT NULL OR found_by = 'backstop'")
    op.alter_column("credit_ledger", "task_id", existing_type=sa.String(64), nullable=True)
    op.alter_column("credit_ledger", "tenant_id", existing_type=sa.String(64), nullable=True)
    op.create_check_constraint("ck_credit_ledger_task", "credit_ledger",
                               "(task_id IS NOT NULL AND tenant_id IS NOT NULL) OR entry_type = 'ADJUSTMENT'")


def downgrade() -> None:
    op.drop_constraint("ck_credit_ledger_task", "credit_ledger")
    op.execute("DELETE FROM credit_ledger WHERE task_id IS NULL")
    op.alter_column("credit_ledger", "tenant_id", existing_type=sa.String(64), nullable=False)
    op.alter_column("credit_ledger", "task_id", existing_type=sa.String(64), nullable=False)
    op.drop_constraint("ck_stray_jobs_task", "stray_jobs")
    op.execute("DELETE FROM stray_jobs WHERE task_id IS NULL")
    op.alter_column("stray_jobs", "attempt_no", existing_type=sa.Integer(), nullable=False)
    op.alter_column("stray_jobs", "task_id", existing_type=sa.String(64), nullable=False)
    op.drop_column("stray_jobs", "evidence")
    op.drop_column("stray_jobs", "request_key")
