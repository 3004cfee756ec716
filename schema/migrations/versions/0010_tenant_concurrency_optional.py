"""tenants.max_concurrent is optional: NULL (no tenant layer) for tenants the importer makes

A tenant made with `reelqueue tenants create` has its concurrency (its gate, GenerationWorkflow's
tenant-admission-v1); the importer's tenant (`default`) keeps running its tasks behind the provider
gates alone, as before 0008. Tenants without an API key lose the 10 that 0008's default gave them.

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.alter_column("tenants", "max_concurrent", nullable=True, server_default=None)
    op.execute("UPDATE tenants t SET max_concurrent = NULL WHERE NOT EXISTS "
               "(SELECT 1 FROM api_keys k WHERE k.tenant_id = t.id)")


def downgrade() -> None:
    op.execute("UPDATE tenants SET max_concurrent = 10 WHERE max_concurrent IS NULL")
    op.alter_column("tenants", "max_concurrent", nullable=False, server_default=sa.text("10"))
