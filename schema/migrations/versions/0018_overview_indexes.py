"""overview_indexes: the overview page's failures, thumbnails and task list read what they show

control/overview.py takes the top of each side of an import's scope (the tasks it created, the tasks
it reused) and then the top of the two; on the created side these indexes let it walk the import's
tasks in the order it shows and stop at its LIMIT, instead of reading every task of the import:

- `ix_tasks_import_updated` (import_id, updated_at DESC, id): the 200 most recently changed tasks.
- `ix_tasks_import_succeeded` (import_id, finished_at DESC NULLS LAST, id) WHERE SUCCEEDED: the
  latest finished videos with a thumbnail.
- `ix_tasks_import_failed` (import_id, id) WHERE failed or NEEDS_ATTENTION: the failed tasks grouped
  by reason, at most FAILURES_READ of them by id.

The two partial indexes hold only the tasks in those statuses (an import's inserts, all CREATED,
add nothing to them); `ix_tasks_import_updated` takes an entry per task and per change of
`updated_at`. Plain CREATE INDEX (it blocks writes to `tasks` while it builds): at 200,000 tasks of
one import the three took 4.6-6.4 s together at load 16-20 (`python -m bench.spend_bench --explain`, which
builds them again over its seeded tasks; docs/performance.md).

Revision ID: 0018
Revises: 0017
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

# control.overview.FAILED (the failed band and NEEDS_ATTENTION), as of this revision
_FAILED = "('FAILED_FINAL','EXPIRED','CANCELED','REJECTED','INVALID','NEEDS_ATTENTION')"


def upgrade() -> None:
    op.create_index("ix_tasks_import_updated", "tasks", ["import_id", sa.text("updated_at DESC"), "id"])
    op.create_index("ix_tasks_import_succeeded", "tasks", ["import_id", sa.text("finished_at DESC NULLS LAST"), "id"],
                    postgresql_where=sa.text("status = 'SUCCEEDED'"))
    op.create_index("ix_tasks_import_failed", "tasks", ["import_id", "id"],
                    postgresql_where=sa.text(f"status IN {_FAILED}"))


def downgrade() -> None:
    for name in ("ix_tasks_import_failed", "ix_tasks_import_succeeded", "ix_tasks_import_updated"):
        op.drop_index(name, table_name="tasks")
