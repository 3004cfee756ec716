"""tasks: fewer checks and index entries per imported task

- the unique (tenant_id, id) goes: `id` alone is the primary key, so the pair was unique anyway,
  and no foreign key or query uses it;
- the three foreign keys tenant_id, plan_id and import_id become one composite key
  (import_id, tenant_id, plan_id) -> catalog_imports (id, tenant_id, plan_id): the import row
  references its tenant and plan, so both still exist, and the task's tenant and plan must now
  also be its import's (one check per row instead of three);
- `import_tasks` keeps the links of reused tasks only: the import that created a task is
  `tasks.import_id` (indexed now); the creator links already stored are deleted.

Revision ID: 0007
Revises: 0006
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_constraint("tasks_tenant_id_id_key", "tasks", type_="unique")
    op.create_unique_constraint("uq_catalog_imports_id_tenant_plan", "catalog_imports", ["id", "tenant_id", "plan_id"])
    for column in ("tenant_id", "plan_id", "import_id"):
        op.drop_constraint(f"tasks_{column}_fkey", "tasks", type_="foreignkey")
    op.create_foreign_key("fk_tasks_import_tenant_plan", "tasks", "catalog_imports",
                          ["import_id", "tenant_id", "plan_id"], ["id", "tenant_id", "plan_id"])
    op.create_index("ix_tasks_import_id", "tasks", ["import_id"])
    op.execute("DELETE FROM import_tasks l USING tasks t WHERE l.task_id = t.id AND l.import_id = t.import_id")


def downgrade() -> None:
    op.execute("INSERT INTO import_tasks (import_id, task_id, reused) SELECT import_id, id, false FROM tasks "
               "ON CONFLICT DO NOTHING")
    op.drop_index("ix_tasks_import_id", "tasks")
    op.drop_constraint("fk_tasks_import_tenant_plan", "tasks", type_="foreignkey")
    op.create_foreign_key("tasks_tenant_id_fkey", "tasks", "tenants", ["tenant_id"], ["id"])
    op.create_foreign_key("tasks_plan_id_fkey", "tasks", "plans", ["plan_id"], ["id"])
    op.create_foreign_key("tasks_import_id_fkey", "tasks", "catalog_imports", ["import_id"], ["id"])
    op.drop_constraint("uq_catalog_imports_id_tenant_plan", "catalog_imports", type_="unique")
    op.create_unique_constraint("tasks_tenant_id_id_key", "tasks", ["tenant_id", "id"])
