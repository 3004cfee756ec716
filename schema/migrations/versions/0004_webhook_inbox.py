"""webhook inbox: provider_events keeps the raw delivery, its match state and when it was signaled

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_ORPHAN = sa.text("state = 'orphan'")


def upgrade() -> None:
    op.add_column("provider_events", sa.Column("request_key", sa.String(length=300), nullable=True))
    # Rows written before this revision (none are: nothing received webhooks) count as matched.
    op.add_column("provider_events", sa.Column("state", sa.String(length=16), nullable=False,
                                               server_default="matched"))
    op.alter_column("provider_events", "state", server_default=None)
    op.add_column("provider_events", sa.Column("matched_by", sa.String(length=16), nullable=True))
    op.add_column("provider_events", sa.Column("headers", postgresql.JSONB(), nullable=True))
    op.add_column("provider_events", sa.Column("raw_body", sa.Text(), nullable=True))
    for name in ("observed_at", "matched_at", "signaled_at"):
        op.add_column("provider_events", sa.Column(name, sa.DateTime(timezone=True), nullable=True))
    op.create_check_constraint("ck_provider_events_state", "provider_events",
                               "state IN ('matched','orphan','expired')")
    op.create_index("ix_provider_events_orphan_job", "provider_events", ["provider", "provider_job_id"],
                    postgresql_where=_ORPHAN)
    op.create_index("ix_provider_events_orphan_key", "provider_events", ["provider", "request_key"],
                    postgresql_where=_ORPHAN)
    op.create_index("ix_provider_events_orphan_age", "provider_events", ["received_at"], postgresql_where=_ORPHAN)
    op.create_index("ix_provider_events_task", "provider_events", ["task_id"])


def downgrade() -> None:
    for name in ("ix_provider_events_task", "ix_provider_events_orphan_age", "ix_provider_events_orphan_key",
                 "ix_provider_events_orphan_job"):
        op.drop_index(name, table_name="provider_events")
    op.drop_constraint("ck_provider_events_state", "provider_events", type_="check")
    for name in ("signaled_at", "matched_at", "observed_at", "raw_body", "headers", "matched_by", "state",
                 "request_key"):
        op.drop_column("provider_events", name)
