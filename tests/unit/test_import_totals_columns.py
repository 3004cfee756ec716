"""Migration 0017 freezes the statuses, the waste causes and the shard count its triggers count by;
the code that reads its tables derives them from the contracts: both must name the same columns."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from contracts.task import TaskStatus
from schema import import_totals
from schema.spend import WASTE_BY_END

MIGRATION = Path(import_totals.__file__).parent / "migrations" / "versions" / "0017_import_totals.py"


def _migration():  # noqa: ANN202 - the module
    spec = importlib.util.spec_from_file_location("migration_0017", MIGRATION)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_migration_counts_what_the_readers_read() -> None:
    migration = _migration()
    assert tuple(s.value for s in TaskStatus) == migration.STATUSES
    assert tuple(import_totals.COUNT_OF.values()) == migration.COUNTS
    assert {f"wasted_{cause}": ends for cause, ends in WASTE_BY_END.items()} == migration.WASTED_BY_END
    assert migration.SHARDS == import_totals.SHARDS
