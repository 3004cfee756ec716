"""Engine and short transactions. Every external call happens outside these."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache

from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import Session, sessionmaker


@lru_cache(maxsize=8)
def engine_for(database_url: str) -> Engine:
    """No ping before each checkout (it cost a round trip per transaction, about 25 per task): a
    connection Postgres dropped fails its first statement, SQLAlchemy then discards every pooled
    connection, and the activity or request is retried by its own policy on fresh ones."""
    return create_engine(database_url, pool_size=10, max_overflow=10)


class Database:
    """A thin handle passed into activities and services (dependency injection, easy to test)."""

    def __init__(self, database_url: str):
        self.url = database_url
        self.engine = engine_for(database_url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """One short transaction: commit on success, roll back on any error."""
        with self._sessions() as session, session.begin():
            yield session
