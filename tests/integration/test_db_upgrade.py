"""`reelqueue db upgrade` on an empty database, twice: the first run brings it to head, the second
finds nothing to do; both exit 0 (the one-shot job a deploy runs before the workers start)."""

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


def _upgrade(database_url: str, tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REELQUEUE_")}
    done = subprocess.run([REELQUEUE, "db", "upgrade", "--json"], capture_output=True, text=True, timeout=120,
                          env={**env, "DATABASE_URL": database_url, "REELQUEUE_HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


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
