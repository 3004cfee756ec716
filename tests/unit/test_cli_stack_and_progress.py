"""How the CLI finds its stack: $REELQUEUE_HOME, else the nearest `.reelqueue` with a stack.json at or
above the current directory, else it says plainly that none runs and how to start one; shell
completion; the progress of `import` while it checks images."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from config.settings import STACK_FILE, Settings, find_home, get_settings

STACK_DB = "postgresql+psycopg://reelqueue@127.0.0.1:45999/reelqueue"


@pytest.fixture
def bare_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for key in [k for k in os.environ if k.startswith("REELQUEUE_") or k == "DATABASE_URL"]:
        monkeypatch.delenv(key)
    return monkeypatch


def _stack(root: Path) -> Path:
    home = root / ".reelqueue"
    home.mkdir(parents=True)
    (home / STACK_FILE).write_text(json.dumps({"settings": {"database_url": STACK_DB}}))
    return home


def test_the_nearest_stack_above_the_current_directory_is_used(tmp_path: Path, bare_env) -> None:  # noqa: ANN001
    home = _stack(tmp_path / "project")
    deep = tmp_path / "project" / "catalogs" / "spring"
    deep.mkdir(parents=True)
    bare_env.chdir(deep)
    assert find_home() == home.resolve()
    settings = Settings()
    assert (settings.database_url, settings.home) == (STACK_DB, home.resolve())


def test_reelqueue_home_wins_over_a_stack_above(tmp_path: Path, bare_env) -> None:  # noqa: ANN001
    _stack(tmp_path / "project")
    elsewhere = _stack(tmp_path / "other")
    bare_env.chdir(tmp_path / "project")
    bare_env.setenv("REELQUEUE_HOME", str(elsewhere))
    assert find_home() == elsewhere


def test_without_a_stack_the_cli_says_none_runs_and_how_to_start_one(tmp_path: Path, bare_env, capsys) -> None:  # noqa: ANN001
    import starter

    bare_env.chdir(tmp_path)
    bare_env.setattr(sys, "argv", ["reelqueue", "status"])
    get_settings.cache_clear()
    try:
        with pytest.raises(SystemExit) as ended:
            starter._run()
    finally:
        get_settings.cache_clear()
    assert ended.value.code == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "no reelqueue stack is running" in err and "reelqueue dev up" in err
    assert str(tmp_path) in err


def test_shell_completion_can_be_installed(cli) -> None:  # noqa: ANN001 - the conftest runner
    result = cli("--help")
    assert result.exit_code == 0 and "--install-completion" in result.stdout


def test_import_tells_its_progress_bar_about_every_image_it_checks(tmp_path: Path, bare_env) -> None:  # noqa: ANN001
    from catalog.plan import load_plan
    from catalog.service import run_import

    examples = Path(__file__).resolve().parents[2] / "examples"
    checked = []
    summary = run_import(Settings(home=tmp_path), examples / "catalog.csv", load_plan(examples / "plan.toml"),
                         dry_run=True, on_image=lambda: checked.append(1))
    assert summary.products == len(checked) > 0
