"""Which failures mean "Postgres or object storage is out of reach" (activities/errors.py): those the
workflow waits out past a step's budget (degradation-v1); anything else stays an ordinary error."""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy.exc import IntegrityError, InternalError, OperationalError, ProgrammingError
from urllib3.exceptions import MaxRetryError

from activities.errors import unavailable_dependency
from schema.db import session_options


@pytest.mark.parametrize(("exc", "says"), [
    (OperationalError("INSERT", {}, psycopg.errors.LockNotAvailable("lock")), "lock not available"),
    (OperationalError("INSERT", {}, psycopg.errors.QueryCanceled("cancel")), "statement timed out"),
    (InternalError("INSERT", {}, psycopg.errors.ReadOnlySqlTransaction("ro")), "read-only"),
    (ProgrammingError("INSERT", {}, psycopg.errors.InsufficientPrivilege("no")), "permission denied"),
    (OperationalError("SELECT", {}, psycopg.OperationalError("connection refused")), "unreachable"),
    (MaxRetryError(None, "/bucket/key", "connection refused"), "object storage is unreachable"),
])
def test_an_outage_or_a_refused_write_is_a_dependency_failure(exc: Exception, says: str):
    assert says in (unavailable_dependency(exc) or "")


@pytest.mark.parametrize("exc", [
    IntegrityError("INSERT", {}, psycopg.errors.UniqueViolation("dup")),
    ProgrammingError("SELECT", {}, psycopg.errors.UndefinedColumn("no column")),
])
def test_a_bug_or_a_constraint_is_not(exc: Exception):
    assert unavailable_dependency(exc) is None


def test_session_options_bound_lock_waits_and_statements():
    options = session_options(lock_timeout_s=5, statement_timeout_s=20.5)
    assert options == "-c lock_timeout=5000 -c statement_timeout=20500"
    assert session_options() == ""


def test_a_command_that_cannot_reach_the_database_says_which_in_one_line_and_exits_4(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("REELQUEUE_")}
    env.update(REELQUEUE_HOME=str(tmp_path), DATABASE_URL="postgresql+psycopg://rq:sekret@127.0.0.1:1/ledgerdb?connect_timeout=2")
    done = subprocess.run([sys.executable, str(root / "starter.py"), "import", str(root / "examples" / "catalog.csv"),
                           "--plan", str(root / "examples" / "plan.toml")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert done.returncode == 4, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "Postgres at 127.0.0.1:1/ledgerdb" in lines[0] and "nothing was written" in lines[0], lines
    assert "sekret" not in done.stderr
