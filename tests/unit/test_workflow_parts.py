"""GenerationWorkflow stays a package of small parts (docs/architecture.md, "The generation workflow in
parts"): no file of workflows/generation/ grows past MAX_LINES, and the split never changes the names
the workflow is registered and messaged under."""

from __future__ import annotations

import ast
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
                                 api.SIGNAL_TENANT_SLOT_GRANTED, api.SIGNAL_MODEL_SLOT_GRANTED,
                                 api.SIGNAL_PLATFORM_SLOT_GRANTED, api.SIGNAL_PROVIDER_UPDATE}
    assert set(defn.queries) == {api.QUERY_STATUS, api.QUERY_DETAILS}
    assert set(defn.updates) == {api.UPDATE_RESOLVE, api.UPDATE_REVIEW}


# The parts are imported once, passed through the sandbox (workflow.py), so the sandbox does not
# check their calls: they may import only these, and never read the clock but through `workflow`.
PART_IMPORTS = {"__future__", "asyncio", "contextlib", "collections", "datetime", "typing", "temporalio",
                "activities", "contracts", "schema", "workflows"}
CLOCKS = {"now", "utcnow", "today", "time", "monotonic", "perf_counter", "random", "uuid4", "sleep"}


def root_of(node: ast.expr) -> str | None:
    """The name a chain of attributes and calls starts from (`workflow` in `workflow.random().uniform`)."""
    while isinstance(node, ast.Attribute | ast.Call):
        node = node.value if isinstance(node, ast.Attribute) else node.func
    return node.id if isinstance(node, ast.Name) else None


def outside_the_sandbox_rules(source: str) -> list[str]:
    """What a part's source does that the sandbox would refuse or that breaks replay."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name.split(".")[0] not in PART_IMPORTS]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] not in PART_IMPORTS:
            found.append(f"from {node.module} import")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CLOCKS
              and root_of(node.func) != "workflow"):
            found.append(f"{ast.unparse(node.func)}()")
    return found


def test_the_parts_read_time_and_chance_only_through_workflow():
    found = {p.name: outside_the_sandbox_rules(p.read_text()) for p in PACKAGE.glob("*.py")}
    assert {name: f for name, f in found.items() if f} == {}


def test_the_sandbox_rules_find_a_clock_and_a_stray_import():
    assert outside_the_sandbox_rules("import time\nfrom datetime import datetime\nx = datetime.now()\n"
                                     "y = workflow.now()\nz = workflow.random().random()\n") == [
        "import time", "datetime.now()"]
