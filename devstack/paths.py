"""Where the embedded stack keeps its state: one home directory, shared by every process."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from config.settings import STACK_FILE, Settings


@dataclass(frozen=True)
class StackPaths:
    """Absolute paths under $REELQUEUE_HOME (resolved once, so children and cwd changes agree)."""

    home: Path

    @property
    def stack_file(self) -> Path:
        return self.home / STACK_FILE

    @property
    def lock_file(self) -> Path:
        return self.home / "stack.lock"

    def log(self, name: str) -> Path:
        return self.home / "logs" / f"{name}.log"

    def pid(self, name: str) -> Path:
        return self.home / "pids" / f"{name}.pid"

    def data(self, name: str) -> Path:
        return self.home / "data" / name

    def ensure(self) -> None:
        """The home and its folders, owner only (0700). Under root the home and data/ keep other users'
        execute bit where it is set: the embedded Postgres, run as its own user, traverses them to its
        data dir (traverse, never list or read)."""
        for sub in ("", "logs", "pids", "data", "run"):
            folder = self.home / sub
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            keep = folder.stat().st_mode & stat.S_IXOTH if os.geteuid() == 0 and sub in ("", "data") else 0
            folder.chmod(0o700 | keep)


def stack_paths(settings: Settings) -> StackPaths:
    return StackPaths(settings.home.expanduser().resolve())


def worker_ready_file(settings: Settings) -> Path:
    """The worker touches this once it polls its task queue; `up` waits for it."""
    return stack_paths(settings).home / "run" / "worker.ready"


def mark_worker_ready(settings: Settings) -> Path:
    """Called by worker.py when it is ready: writes its pid into the ready file."""
    path = worker_ready_file(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{os.getpid()}\n")
    os.replace(tmp, path)
    return path
