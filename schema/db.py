"""Engine and short transactions. Every external call happens outside these."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache

from sqlalchemy import Engine, create_engine, make_url, text
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session, sessionmaker


@lru_cache(maxsize=8)
def engine_for(database_url: str, options: str = "") -> Engine:
    """No ping before each checkout (it cost a round trip per transaction, about 25 per task): a
    connection Postgres dropped fails its first statement, SQLAlchemy then discards every pooled
    connection, and the activity or request is retried by its own policy on fresh ones.
    `options` are libpq's (`-c name=value`), set on every connection of this engine."""
    connect_args = {"options": options} if options else {}
    return create_engine(database_url, pool_size=10, max_overflow=10, connect_args=connect_args)


def session_options(*, lock_timeout_s: float | None = None, statement_timeout_s: float | None = None) -> str:
    """libpq options bounding how long one statement may wait for a lock or run: a locked table then
    fails the statement (and the activity, retried) instead of holding a worker thread forever."""
    parts = []
    if lock_timeout_s is not None:
        parts.append(f"-c lock_timeout={int(lock_timeout_s * 1000)}")
    if statement_timeout_s is not None:
        parts.append(f"-c statement_timeout={int(statement_timeout_s * 1000)}")
    return " ".join(parts)


class Database:
    """A thin handle passed into activities and services (dependency injection, easy to test)."""

    def __init__(self, database_url: str, options: str = ""):
        self.url = database_url
        self.engine = engine_for(database_url, options)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """One short transaction: commit on success, roll back on any error."""
        with self._sessions() as session, session.begin():
            yield session


# SQLSTATEs of a database that is up but will not take the statement now (docs/reliability.md).
DATABASE_REFUSALS = {
    "55P03": "lock not available (lock_timeout)",
    "57014": "statement timed out (statement_timeout)",
    "25006": "the database is read-only",
    "42501": "permission denied",
    "57P01": "the server is shutting down",
    "57P03": "the server is starting up",
}


def database_unavailable(exc: DBAPIError) -> str | None:
    """Why Postgres cannot be used now (unreachable, or refusing the statement: a lock held, read-only),
    in one line without hosts or SQL; None for anything else (a bug, a constraint violation)."""
    code = getattr(exc.orig, "sqlstate", None)
    if code in DATABASE_REFUSALS:
        return f"the database refused the statement: {DATABASE_REFUSALS[code]}"
    if isinstance(exc, OperationalError) or exc.connection_invalidated:
        return "the database is unreachable"
    return None


def bound_lock_waits(session: Session, seconds: float) -> None:
    """This transaction gives up waiting for a lock after `seconds` (a request must not hang on the
    ledger locked by a migration: it answers 503 and writes nothing)."""
    session.execute(text(f"SET LOCAL lock_timeout = {int(seconds * 1000)}"))


def database_name(database_url: str) -> str:
    """The database as a user would name it: host, port and name, without the password."""
    url = make_url(database_url)
    return f"{url.host or 'localhost'}:{url.port or 5432}/{url.database or ''}"
