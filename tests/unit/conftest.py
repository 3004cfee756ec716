"""Fixtures of the unit tests."""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from config.settings import get_settings


@pytest.fixture
def cli(tmp_path, monkeypatch):
    """Run the CLI with only the given REELQUEUE_* variables (and an empty home)."""
    from starter import app

    def run(*args: str, **env: str):  # noqa: ANN202 - a click Result
        for key in [k for k in os.environ if k.startswith("REELQUEUE_")]:
            monkeypatch.delenv(key)
        monkeypatch.setenv("REELQUEUE_HOME", str(tmp_path))
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        get_settings.cache_clear()
        try:
            return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
        finally:
            get_settings.cache_clear()

    return run
