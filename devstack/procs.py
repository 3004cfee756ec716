"""Detached processes: spawn into their own session, pid files, liveness, graceful stop."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import BinaryIO

# Popen handles of children this process spawned: polling them reaps zombies, which
# `os.kill(pid, 0)` would otherwise report as alive.
_children: dict[int, subprocess.Popen[bytes]] = {}


def private_log(path: Path) -> BinaryIO:
    """`path` opened for appending, readable by its owner only (logs carry URLs and errors)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    handle = os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")
    os.fchmod(handle.fileno(), 0o600)  # a log from an older version was 0644
    return handle


def spawn(
    cmd: list[str],
    *,
    log: Path,
    env: dict[str, str],
    cwd: Path,
    user: tuple[int, int] | None = None,
) -> int:
    """Start `cmd` in a new session with stdout/stderr appended to `log`; returns its pid."""
    drop: dict[str, object] = {}
    if user is not None:
        drop = {"user": user[0], "group": user[1], "extra_groups": []}
    with private_log(log) as out:
        out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} start: {' '.join(cmd)}\n".encode())
        out.flush()
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,
            **drop,  # type: ignore[arg-type]
        )
    _children[proc.pid] = proc
    return proc.pid


def is_alive(pid: int) -> bool:
    proc = _children.get(pid)
    if proc is not None:
        return proc.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def cmdline(pid: int) -> str | None:
    """The process's command line, or None where /proc is not available."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def write_pid(path: Path, pid: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{pid}\n")


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_alive(pid):
            return True
        time.sleep(0.05)
    return not is_alive(pid)


def send(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def stop_pid(pid: int, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
    """`sig`, wait up to `timeout`, then SIGKILL; finally sweep what is left of its process group."""
    if is_alive(pid):
        send(pid, sig)
        if not _wait_gone(pid, timeout):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            send(pid, signal.SIGKILL)
            _wait_gone(pid, 5.0)
    # start_new_session made pid the group id; a group id is never reused while members live.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    _children.pop(pid, None)
