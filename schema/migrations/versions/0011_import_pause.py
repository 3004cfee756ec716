"""catalog_imports.paused_by / paused_at: `reelqueue pause` holds an import's tasks before they ask for a slot

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("catalog_imports", sa.Column("paused_by", sa.String(200), nullable=True))
    op.add_column("catalog_imports", sa.Column("paused_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("catalog_imports", "paused_at")
    op.drop_column("catalog_imports", "paused_by")
