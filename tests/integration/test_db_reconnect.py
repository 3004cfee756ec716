"""The pool runs without a ping per checkout; what that relies on, against the real Postgres."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from config.settings import Settings
from schema.db import Database


def test_connections_postgres_dropped_fail_once_then_the_pool_reconnects(stack: Settings) -> None:
    db = Database(f"{stack.database_url}?application_name=reconnect-test")
    sessions = [db._sessions() for _ in range(3)]  # three pooled connections, all checked out once
    for session in sessions:
        session.execute(text("SELECT 1"))
    for session in sessions:
        session.close()
    with Database(stack.database_url).transaction() as admin:
        dropped = admin.execute(text("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                     "WHERE application_name = 'reconnect-test'")).scalar_one()
    assert dropped == 3

    with pytest.raises(DBAPIError) as failed, db.transaction() as session:
        session.execute(text("SELECT 1"))
    assert failed.value.connection_invalidated, "a dropped connection is recognised as a disconnect"
    for _ in range(3):  # every other pooled connection was discarded with it: no second failure
        with db.transaction() as session:
            assert session.execute(text("SELECT 1")).scalar_one() == 1
