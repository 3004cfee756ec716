"""attempt_route_note: the route an attempt was sent on, and why the routes before it were skipped

A task whose template names fallback routes chooses the route of each paid attempt
(activities/routing.py); the attempt's provider and model say where it went, this note says why.

Revision ID: 0016
Revises: 0015
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("attempts", sa.Column("route_note", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("attempts", "route_note")
