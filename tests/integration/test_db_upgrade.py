"""`reelqueue db upgrade` on an empty database, twice: the first run brings it to head, the second
finds nothing to do; both exit 0 (the step every pod runs before its app starts). A database a later
release has migrated is left alone, exit 0 (an older build's pods start while its runs drain); one at
a revision no release of ours wrote is refused, exit 1, untouched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import create_engine, inspect
from sqlalchemy.engine import make_url

from config.settings import Settings
from devstack.probes import psycopg_conninfo
from schema.migrate import head_revision

pytestmark = pytest.mark.integration

REELQUEUE = str(Path(sys.executable).with_name("reelqueue"))


@pytest.fixture
def empty_database(stack: Settings) -> Iterator[str]:
    name = f"upgrade_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(psycopg_conninfo(stack.database_url), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield make_url(stack.database_url).set(database=name).render_as_string(hide_password=False)
    with psycopg.connect(psycopg_conninfo(stack.database_url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def _run_upgrade(database_url: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REELQUEUE_")}
    return subprocess.run([REELQUEUE, "db", "upgrade", *args], capture_output=True, text=True, timeout=120,
                          env={**env, "DATABASE_URL": database_url, "REELQUEUE_HOME": str(tmp_path)})


def _upgrade(database_url: str, tmp_path: Path) -> dict:
    done = _run_upgrade(database_url, tmp_path, "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def _stamp(database_url: str, revision: str) -> None:
    """Put the database at `revision` as a migration would (alembic's own table)."""
    with psycopg.connect(psycopg_conninfo(database_url), autocommit=True) as conn:
        conn.execute("UPDATE alembic_version SET version_num = %s", (revision,))


def _state(database_url: str) -> tuple[str, list[str]]:
    with psycopg.connect(psycopg_conninfo(database_url), autocommit=True) as conn:
        revision = conn.execute("SELECT version_num FROM alembic_version").fetchone()[0]
        tables = [row[0] for row in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1")]
    return revision, tables


def test_db_upgrade_brings_an_empty_database_to_head_once(empty_database: str, tmp_path: Path) -> None:
    first = _upgrade(empty_database, tmp_path)
    assert (first["from"], first["to"], first["changed"]) == (None, head_revision(), True)
    engine = create_engine(empty_database)
    try:
        assert {"tasks", "catalog_imports", "credit_ledger"} <= set(inspect(engine).get_table_names())
    finally:
        engine.dispose()
    second = _upgrade(empty_database, tmp_path)
    assert (second["from"], second["to"], second["changed"]) == (head_revision(), head_revision(), False)


def test_a_database_a_later_release_migrated_is_left_alone(empty_database: str, tmp_path: Path) -> None:
    """An older build's pod (scale-up, eviction while its pinned runs drain) runs its own `db upgrade`
    after a newer release migrated: exit 0, nothing changed, rather than stuck in Init."""
    _upgrade(empty_database, tmp_path)
    later = f"{int(head_revision()) + 83:04d}_next_release"
    _stamp(empty_database, later)
    before = _state(empty_database)
    done = _upgrade(empty_database, tmp_path)
    assert (done["from"], done["to"], done["head"], done["changed"], done["newer"]) == (
        later, later, head_revision(), False, True)
    assert _state(empty_database) == before
    said = _run_upgrade(empty_database, tmp_path)
    assert said.returncode == 0 and "newer than this build's head" in said.stdout, said.stdout + said.stderr


@pytest.mark.parametrize("revision", ["not_ours", "0003a", "0001_old_branch"])
def test_a_revision_no_release_wrote_is_refused_and_left_alone(empty_database: str, tmp_path: Path,
                                                               revision: str) -> None:
    _upgrade(empty_database, tmp_path)
    _stamp(empty_database, revision)
    before = _state(empty_database)
    done = _run_upgrade(empty_database, tmp_path, "--json")
    assert done.returncode == 1, done.stdout + done.stderr[-2000:]
    assert revision in json.loads(done.stdout)["error"]
    assert _state(empty_database) == before
