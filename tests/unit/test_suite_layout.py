"""The test folders have no __init__.py, so pytest imports each test module by its file name alone:
two files of one name in different folders make the second an import error (`import file mismatch`)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_name_is_unique_across_the_folders() -> None:
    names = Counter(path.name for path in TESTS.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []
