"""provider_poll_budgets: when the next status call to each provider may start (the polling budget)

Revision ID: 0014
Revises: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "provider_poll_budgets",
        sa.Column("provider", sa.String(64), primary_key=True),
        sa.Column("next_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("provider_poll_budgets")
