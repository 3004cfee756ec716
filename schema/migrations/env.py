"""Alembic environment: online migrations against the configured URL."""

from alembic import context
from sqlalchemy import create_engine, pool

from schema.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    engine = create_engine(config.get_main_option("sqlalchemy.url"), poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata)
        with context.begin_transaction():
            # Two processes may start at once (worker and CLI): serialize migrations.
            connection.exec_driver_sql("SELECT pg_advisory_xact_lock(7355608)")
            context.run_migrations()


run_migrations_online()
