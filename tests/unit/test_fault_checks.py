"""bench/fault_checks.py breaks the code under each timing-sensitive test in a copy of the repository:
its breaks must still apply to today's code, and name tests that exist, or the run checks nothing."""

from __future__ import annotations

import ast

import pytest

from bench.fault_checks import FAULTS, REPO, Fault, break_copy


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_each_fault_applies_once_to_code_that_still_compiles(fault: Fault) -> None:
    source = (REPO / fault.path).read_text()
    assert source.count(fault.old) == 1, f"{fault.path} no longer holds the text {fault.name} replaces"
    ast.parse(source.replace(fault.old, fault.new), fault.path)  # the broken copy still imports


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_each_fault_names_a_test_that_exists(fault: Fault) -> None:
    path, _, name = fault.test.partition("::")
    assert f"def {name}(" in (REPO / path).read_text()


def test_names_are_unique() -> None:
    assert len({f.name for f in FAULTS}) == len(FAULTS)


def test_the_copy_carries_the_fault_and_leaves_the_tree_alone(tmp_path) -> None:
    if not (REPO / ".git").exists():
        pytest.skip("the copy lists its files with git: this tree is not a git checkout")
    fault = FAULTS[0]
    before = (REPO / fault.path).read_text()
    break_copy(fault, tmp_path)
    assert (tmp_path / fault.path).read_text() == before.replace(fault.old, fault.new)
    assert (REPO / fault.path).read_text() == before
    assert (tmp_path / "pyproject.toml").read_bytes() == (REPO / "pyproject.toml").read_bytes()
