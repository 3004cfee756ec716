"""GenerationWorkflow stays a package of small parts (docs/architecture.md, "The generation workflow in
parts"): no file of workflows/generation/ grows past MAX_LINES, and the split never changes the names
the workflow is registered and messaged under."""

from __future__ import annotations

from pathlib import Path

from temporalio import workflow

from contracts import workflow_api as api
from workflows.generation import GenerationWorkflow

PACKAGE = Path(__file__).resolve().parents[2] / "workflows" / "generation"
MAX_LINES = 400


def too_long(package: Path, limit: int = MAX_LINES) -> dict[str, int]:
    """The package's files over `limit` lines, with their length."""
    lengths = {p.relative_to(package).as_posix(): len(p.read_text().splitlines()) for p in package.rglob("*.py")}
    return {name: n for name, n in lengths.items() if n > limit}


def test_no_part_of_the_generation_workflow_is_over_the_limit():
    assert len(list(PACKAGE.rglob("*.py"))) > 1
    assert too_long(PACKAGE) == {}, f"split these further: {too_long(PACKAGE)}"


def test_the_limit_finds_a_file_one_line_over(tmp_path):
    (tmp_path / "ok.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    assert too_long(tmp_path) == {"long.py": MAX_LINES + 1}


def test_the_workflow_keeps_its_registered_names():
    """Histories, the gateway, control/ and the gates address the workflow by these names."""
    defn = workflow._Definition.must_from_class(GenerationWorkflow)
    assert defn.name == api.WORKFLOW_NAME
    assert set(defn.signals) == {api.SIGNAL_CANCEL, api.SIGNAL_PAUSE, api.SIGNAL_SLOT_GRANTED, api.SIGNAL_SLOT_CHECK,
                                 api.SIGNAL_TENANT_SLOT_GRANTED, api.SIGNAL_PROVIDER_UPDATE}
    assert set(defn.queries) == {api.QUERY_STATUS, api.QUERY_DETAILS}
    assert set(defn.updates) == {api.UPDATE_RESOLVE, api.UPDATE_REVIEW}
