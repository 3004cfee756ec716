"""moderation_judgements: every moderator's answer on a task's or an asset's content, at each gate

One row per judgement (issue 46, scope 5): the tenant, what was judged (a task or an asset, and
whether the content was text, an image or video frames), the gate (input, upload, output, or
provider for a provider's own refusal), the moderator and its model version, the verdict, the
categories that drove it, the scores, the latency and the evidence (terms matched, frame times, a
note). `idempotency_key` is unique: a step retried after a crash records its judgement once
(schema/moderation_judgements.py).

Revision ID: 0021
Revises: 0020
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "moderation_judgements",
        sa.Column("id", sa.BigInteger(), primary_key=True, autoincrement=True),
        sa.Column("tenant_id", sa.String(64), sa.ForeignKey("tenants.id"), nullable=False),
        sa.Column("subject_kind", sa.String(8), nullable=False),
        sa.Column("subject_id", sa.String(64), nullable=False),
        sa.Column("content_kind", sa.String(16), nullable=False),
        sa.Column("gate", sa.String(16), nullable=False),
        sa.Column("moderator", sa.String(64), nullable=False),
        sa.Column("model_version", sa.String(128), nullable=False),
        sa.Column("verdict", sa.String(8), nullable=False),
        sa.Column("categories", JSONB(), server_default=sa.text("'[]'::jsonb"), nullable=False),
        sa.Column("scores", JSONB(), server_default=sa.text("'{}'::jsonb"), nullable=False),
        sa.Column("latency_ms", sa.Integer(), nullable=False),
        sa.Column("evidence", JSONB(), server_default=sa.text("'{}'::jsonb"), nullable=False),
        sa.Column("idempotency_key", sa.String(300), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.UniqueConstraint("idempotency_key", name="uq_moderation_judgements_key"),
        sa.CheckConstraint("subject_kind IN ('task','asset')", name="ck_moderation_judgements_subject"),
        sa.CheckConstraint("content_kind IN ('text','image','video_frames')", name="ck_moderation_judgements_content"),
        sa.CheckConstraint("gate IN ('input','upload','output','provider')", name="ck_moderation_judgements_gate"),
        sa.CheckConstraint("verdict IN ('allow','review','block')", name="ck_moderation_judgements_verdict"),
        sa.CheckConstraint("latency_ms >= 0", name="ck_moderation_judgements_latency"),
    )
    op.create_index("ix_moderation_judgements_subject", "moderation_judgements",
                    ["tenant_id", "subject_kind", "subject_id", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_moderation_judgements_subject", table_name="moderation_judgements")
    op.drop_table("moderation_judgements")
