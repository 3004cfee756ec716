"""Migration 0017 freezes the statuses, the waste causes and the shard count its triggers count by;
the code that reads its tables derives them from the contracts: both must name the same columns."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from contracts.task import TaskStatus
from schema import import_totals
from schema.spend import WASTE_BY_END
from schema.strays import STRAY_ADJUSTMENT

MIGRATION = Path(import_totals.__file__).parent / "migrations" / "versions" / "0017_import_totals.py"


def _migration(path: Path = MIGRATION):  # noqa: ANN202 - the module
    spec = importlib.util.spec_from_file_location(f"migration_{path.name[:4]}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_migration_counts_what_the_readers_read() -> None:
    migration = _migration()
    assert tuple(s.value for s in TaskStatus) == migration.STATUSES
    assert tuple(import_totals.COUNT_OF.values()) == migration.COUNTS
    assert {f"wasted_{cause}": ends for cause, ends in WASTE_BY_END.items()} == migration.WASTED_BY_END
    assert migration.SHARDS == import_totals.SHARDS


def test_the_migration_counts_as_duplicates_what_the_readers_do() -> None:
    """Migration 0020 freezes which ADJUSTMENTs are duplicate waste (a stray job's, not the backstop's
    correction of an attempt's own job); spend and `ledger check` read by schema/strays.py's rule."""
    assert _migration(MIGRATION.with_name("0020_duplicate_is_a_stray.py")).STRAY_ADJUSTMENT == STRAY_ADJUSTMENT
