"""stack.json: the endpoints and ports `up` chose, read back by every process through Settings."""

from __future__ import annotations

import json
import os
from typing import Any

from config.settings import Settings

from .paths import StackPaths, stack_paths


def env_override(field: str) -> str | None:
    """The value the user set for a Settings field in the environment (env always wins)."""
    names = {f"REELQUEUE_{field}".upper()}
    if field == "database_url":
        names.add("DATABASE_URL")
    for key, value in os.environ.items():
        if key.upper() in names:
            return value
    return None


def read_stack(paths: StackPaths) -> dict[str, Any]:
    try:
        data = json.loads(paths.stack_file.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        data = {}
    return {"settings": dict(data.get("settings", {})), "ports": dict(data.get("ports", {}))}


def write_stack(paths: StackPaths, data: dict[str, Any]) -> None:
    """Atomic replace, so a process reading Settings never sees half a file; owner only (0600):
    it holds the stack's secrets."""
    paths.ensure()
    tmp = paths.stack_file.with_suffix(".json.tmp")
    tmp.unlink(missing_ok=True)
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
        out.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, paths.stack_file)


def effective_settings(settings: Settings) -> Settings:
    """`settings` with the stack's endpoints applied (env vars still win), home made absolute."""
    paths = stack_paths(settings)
    stacked = read_stack(paths)["settings"]
    update: dict[str, Any] = {
        k: v for k, v in stacked.items() if k in Settings.model_fields and env_override(k) is None
    }
    update["home"] = paths.home
    return settings.model_copy(update=update)
