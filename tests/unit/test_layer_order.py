"""The layers import only downwards (docs/architecture.md, "Where things are"): a module may import
its own part and the parts of lower rank, never a higher one, so config < contracts < schema <
adapters < activities < workflows < control < the entry points (cli, gateway, devstack, bench, the
emulator), which share the top rank: nothing below imports them. There is no list of tolerated
exceptions: the last upward imports (config's defaults from schema, schema's enums from adapters)
moved to config/defaults.py and contracts/, and a new one is fixed by moving the name down, not
by allowing it here."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RANK = {
    "config": 0, "reelqueue_client": 0, "contracts": 1, "telemetry": 1, "schema": 2, "adapters": 3,
    "catalog": 4, "metrics": 4,
    "activities": 5, "workflows": 6, "control": 7, "delivery": 7,
    "cli": 8, "gateway": 8, "devstack": 8, "bench": 8, "emulator": 8, "examples": 8,
}


def imports_of(path: Path) -> Iterator[str]:
    """Every absolute import in the module, at any depth (imports inside functions count too)."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def upward_imports() -> set[tuple[str, str]]:
    found = set()
    for part, rank in RANK.items():
        for path in sorted((ROOT / part).rglob("*.py")):
            for module in imports_of(path):
                target = module.split(".")[0]
                if target != part and RANK.get(target, -1) > rank:
                    found.add((path.relative_to(ROOT).as_posix(), module))
    return found


def test_every_part_has_a_rank():
    parts = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert parts <= set(RANK), f"give these a rank: {sorted(parts - set(RANK))}"


def test_no_import_runs_up_the_layers():
    found = upward_imports()
    assert not found, f"imports of a higher layer: {sorted(found)}"


def test_contracts_read_nothing_of_ours_but_the_config_defaults():
    """contracts/ is what every layer and the workflow sandbox load: of ours it imports only itself
    and config/defaults.py, never the settings (which read the environment and files)."""
    found = sorted(
        (path.relative_to(ROOT).as_posix(), module)
        for path in (ROOT / "contracts").rglob("*.py")
        for module in imports_of(path)
        if module.split(".")[0] in RANK and module.split(".")[0] != "contracts" and module != "config.defaults"
    )
    assert not found, f"contracts/ importing more than config.defaults: {found}"
