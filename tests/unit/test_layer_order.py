"""The layers import only downwards (docs/architecture.md, "Where things are"): a module may import
its own part and the parts of lower rank, never a higher one, so config < contracts < schema <
adapters < activities < workflows < control < the entry points (cli, gateway, devstack, bench, the
emulator, and the top-level `worker.py` and `starter.py`), which share the top rank: nothing below
imports them. Relative imports count as the absolute names they resolve to. There is no list of tolerated
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
    "catalog": 4, "metrics": 4, "moderation": 4,
    "activities": 5, "workflows": 6, "control": 7, "delivery": 7,
    "cli": 8, "gateway": 8, "devstack": 8, "bench": 8, "emulator": 8, "examples": 8,
    "worker": 8, "starter": 8,  # the top-level processes (worker.py, starter.py)
}


def imports_of(path: Path, root: Path = ROOT) -> Iterator[str]:
    """Every import in the module as an absolute name, at any depth (imports inside functions count
    too); a relative one is resolved against the module's package (`from .. import worker` in
    control/x.py is `worker`, `from .paths import p` in devstack/ is `devstack.paths`)."""
    package = list(path.relative_to(root).parent.parts)
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
        elif isinstance(node, ast.ImportFrom) and node.level:
            base = package[:len(package) - (node.level - 1)] if node.level - 1 <= len(package) else []
            if node.module:
                yield ".".join([*base, node.module])
            else:  # `from .. import a, b`: each name is a module or a name of the package
                yield from (".".join([*base, alias.name]) for alias in node.names)


def modules_of(part: str, root: Path = ROOT) -> list[Path]:
    """A package's files, or the top-level module `part.py`."""
    single = root / f"{part}.py"
    return [single] if single.is_file() else sorted((root / part).rglob("*.py"))


def upward_imports(root: Path = ROOT) -> set[tuple[str, str]]:
    found = set()
    for part, rank in RANK.items():
        for path in modules_of(part, root):
            for module in imports_of(path, root):
                target = module.split(".")[0]
                if target != part and RANK.get(target, -1) > rank:
                    found.add((path.relative_to(root).as_posix(), module))
    return found


def test_every_part_has_a_rank():
    parts = {p.parent.name for p in ROOT.glob("*/__init__.py")} | {p.stem for p in ROOT.glob("*.py")}
    assert parts <= set(RANK), f"give these a rank: {sorted(parts - set(RANK))}"


def test_an_upward_import_is_found_however_it_is_written(tmp_path):
    """The check fires on a control module importing the worker entry point, absolutely or
    relatively, and on a relative import from a lower package into a higher one."""
    (tmp_path / "worker.py").write_text("")
    (tmp_path / "control").mkdir()
    (tmp_path / "control" / "__init__.py").write_text("")
    (tmp_path / "schema" / "sub").mkdir(parents=True)
    (tmp_path / "schema" / "sub" / "deep.py").write_text("from ...control import x\nfrom . import sibling\n")
    for text in ("import worker\n", "from .. import worker\n", "def f():\n    from ..worker import main\n"):
        (tmp_path / "control" / "x.py").write_text(text)
        assert upward_imports(tmp_path) == {("control/x.py", "worker"),
                                            ("schema/sub/deep.py", "control")}, text
    (tmp_path / "control" / "x.py").write_text("from . import y\nfrom .y import z\n")  # its own part
    assert upward_imports(tmp_path) == {("schema/sub/deep.py", "control")}


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
