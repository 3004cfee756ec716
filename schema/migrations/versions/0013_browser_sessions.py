"""browser_sessions: short-lived tokens a browser holds instead of the tenant's API key

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "browser_sessions",
        sa.Column("token_sha256", sa.String(64), primary_key=True),
        sa.Column("key_id", sa.String(40), sa.ForeignKey("api_keys.id"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_browser_sessions_key_id", "browser_sessions", ["key_id"])


def downgrade() -> None:
    op.drop_index("ix_browser_sessions_key_id", table_name="browser_sessions")
    op.drop_table("browser_sessions")
