"""Running `reelqueue` commands in-process (typer's CliRunner) against the test stack."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from typer.testing import CliRunner


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str
    exception: BaseException | None

    @property
    def json(self) -> dict[str, Any]:
        return json.loads(self.stdout)


def run_cli(*args: str) -> CliResult:
    """One command with fresh settings (the session's stack), wide output so ids are not folded."""
    from config.settings import get_settings
    from starter import app

    get_settings.cache_clear()
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    get_settings.cache_clear()
    return CliResult(result.exit_code, result.stdout, result.stderr, result.exception)


async def run_cli_async(*args: str) -> CliResult:
    """From an async test: the command runs its own event loop, so it needs its own thread."""
    return await asyncio.to_thread(run_cli, *args)


async def resolve_and_finish(client, task, *decision: str, timeout_s: float = 120) -> dict[str, Any]:
    """`reelqueue resolve TASK <decision>` (exit 0), then the task's workflow outcome."""
    decided = await run_cli_async("resolve", task.id, *decision)
    assert decided.code == 0, decided.stdout + decided.stderr
    return await asyncio.wait_for(client.get_workflow_handle(task.workflow_id).result(), timeout=timeout_s)
