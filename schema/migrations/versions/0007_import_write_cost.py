"""tasks: one foreign-key check and fewer index entries per imported task

- products carry their import's tenant and plan; one composite key
  products (import_id, tenant_id, plan_id) -> catalog_imports (id, tenant_id, plan_id) replaces
  products.import_id's: the import row references its tenant and plan, so both exist;
- tasks: the four foreign keys tenant_id, plan_id, import_id and product_ref become one,
  (product_ref, import_id, tenant_id, plan_id) -> products (id, import_id, tenant_id, plan_id):
  the task's product exists and belongs to the task's import, whose tenant and plan the task
  has (one check per row instead of four; the guarantees are the same or stronger);
- the unique (tenant_id, id) on tasks goes: `id` alone is the primary key, so the pair was unique
  anyway, and no foreign key or query uses it;
- `import_tasks` keeps the links of reused tasks only: the import that created a task is
  `tasks.import_id` (indexed now); the creator links already stored are deleted;
- `tasks.identity` is `json`: the canonical text the id was hashed from, stored as is (jsonb
  parsed and re-sorted it on every insert; it is only read back whole).

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_IMPORT_KEY = ["id", "tenant_id", "plan_id"]
_PRODUCT_KEY = ["id", "import_id", "tenant_id", "plan_id"]


def upgrade() -> None:
    for column in ("tenant_id", "plan_id"):
        op.add_column("products", sa.Column(column, sa.String(length=64), nullable=True))
    op.execute("UPDATE products p SET tenant_id = i.tenant_id, plan_id = i.plan_id "
               "FROM catalog_imports i WHERE i.id = p.import_id")
    for column in ("tenant_id", "plan_id"):
        op.alter_column("products", column, nullable=False)
    op.create_unique_constraint("uq_catalog_imports_id_tenant_plan", "catalog_imports", _IMPORT_KEY)
    op.drop_constraint("products_import_id_fkey", "products", type_="foreignkey")
    op.create_foreign_key("fk_products_import_tenant_plan", "products", "catalog_imports",
                          ["import_id", "tenant_id", "plan_id"], _IMPORT_KEY)
    op.create_unique_constraint("uq_products_id_import_tenant_plan", "products", _PRODUCT_KEY)

    op.drop_constraint("tasks_tenant_id_id_key", "tasks", type_="unique")
    for column in ("tenant_id", "plan_id", "import_id", "product_ref"):
        op.drop_constraint(f"tasks_{column}_fkey", "tasks", type_="foreignkey")
    op.create_foreign_key("fk_tasks_product_import_tenant_plan", "tasks", "products",
                          ["product_ref", "import_id", "tenant_id", "plan_id"], _PRODUCT_KEY)
    op.create_index("ix_tasks_import_id", "tasks", ["import_id"])
    op.execute("DELETE FROM import_tasks l USING tasks t WHERE l.task_id = t.id AND l.import_id = t.import_id")
    op.execute("ALTER TABLE tasks ALTER COLUMN identity TYPE json USING identity::json")


def downgrade() -> None:
    op.execute("ALTER TABLE tasks ALTER COLUMN identity TYPE jsonb USING identity::jsonb")
    op.execute("INSERT INTO import_tasks (import_id, task_id, reused) SELECT import_id, id, false FROM tasks "
               "ON CONFLICT DO NOTHING")
    op.drop_index("ix_tasks_import_id", "tasks")
    op.drop_constraint("fk_tasks_product_import_tenant_plan", "tasks", type_="foreignkey")
    for column, target in (("tenant_id", "tenants"), ("plan_id", "plans"), ("import_id", "catalog_imports")):
        op.create_foreign_key(f"tasks_{column}_fkey", "tasks", target, [column], ["id"])
    op.create_foreign_key("tasks_product_ref_fkey", "tasks", "products", ["product_ref"], ["id"])
    op.create_unique_constraint("tasks_tenant_id_id_key", "tasks", ["tenant_id", "id"])

    op.drop_constraint("uq_products_id_import_tenant_plan", "products", type_="unique")
    op.drop_constraint("fk_products_import_tenant_plan", "products", type_="foreignkey")
    op.create_foreign_key("products_import_id_fkey", "products", "catalog_imports", ["import_id"], ["id"])
    op.drop_constraint("uq_catalog_imports_id_tenant_plan", "catalog_imports", type_="unique")
    for column in ("tenant_id", "plan_id"):
        op.drop_column("products", column)
