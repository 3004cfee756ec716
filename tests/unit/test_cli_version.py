"""`reelqueue --version`: the installed distribution's version, before any command or setting."""

from __future__ import annotations

from importlib.metadata import version


def test_version_prints_the_installed_version(cli) -> None:  # noqa: ANN001 - the conftest runner
    result = cli("--version")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"reelqueue {version('reelqueue')}"
