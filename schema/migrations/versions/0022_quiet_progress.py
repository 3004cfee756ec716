"""quiet_progress: a run that opted in has its signed "job running" webhooks recorded by the gateway

`tasks.quiet_progress` is set by the run's prepare step (lean-path-v1, `schema/quiet_progress.py`
`mark_quiet_progress`): the gateway then moves the task SUBMITTED -> RUNNING itself, with a
compare-and-set through the state machine, and does not signal the workflow (issue 45, item 3).
False for every task written before: runs started before the change are still signaled. A
constant default is kept in the catalog on Postgres 11 and later, so the column is added without
rewriting the tasks table.

Revision ID: 0022
Revises: 0021
"""

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tasks", sa.Column("quiet_progress", sa.Boolean(), server_default=sa.false(), nullable=False))


def downgrade() -> None:
    op.drop_column("tasks", "quiet_progress")
