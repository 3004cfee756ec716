"""Fixtures every test layer may use, and the timeout hook: a test that runs past its timeout
(pytest-timeout, see pyproject.toml) is named on the terminal with the line it waits on, even an
async one, whose hang pytest-timeout's own report shows only as the event loop's select()."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import settings

# No per-example wall-clock deadline: it is a timing assertion (an example took 412 ms against 200 ms
# on a loaded machine) and the suite's timeout already bounds a hang.
settings.register_profile("reelqueue", deadline=None)
settings.load_profile("reelqueue")

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

# The CLI's rich consoles are made once, at import, and size their tables from COLUMNS then (or from
# the terminal, if any): wide in every test process, whatever imports the CLI first (pytest-xdist
# workers have no terminal), so a table never cuts the ids the tests look for.
os.environ["COLUMNS"] = "200"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files marked `long` first: pytest-xdist (--dist loadfile --no-loadscope-reorder) hands
    files out in this order, so a process starts the three-minute scale test at the beginning rather
    than alone at the end while the others sit idle."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """A failure is named on the terminal the moment its report arrives (pytest-xdist's `-q` shows
    only an F until the whole run ends, half an hour later on 2 cores). The controller alone writes."""
    if report.failed and _controller is not None:
        _controller.get_terminal_writer().line(f"\nFAILED {report.nodeid} ({report.when})", red=True)


_controller: pytest.Config | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _controller
    if not hasattr(config, "workerinput"):  # a pytest-xdist worker's terminal is nobody's
        _controller = config


@pytest.hookimpl(hookwrapper=True)
def pytest_timeout_set_timer(item: pytest.Item, settings):
    yield
    if settings.method != "signal":
        return
    fail_the_test = signal.getsignal(signal.SIGALRM)

    def name_then_fail(signum, frame):
        __tracebackhide__ = True
        capture = item.config.pluginmanager.getplugin("capturemanager")
        where: list[str] = []
        loop = asyncio._get_running_loop()
        for task in asyncio.all_tasks(loop) if loop else ():
            code = getattr(task.get_coro(), "cr_code", None)
            if code is not None and code.co_filename == str(item.path):
                where += [f"    waiting at {f.f_code.co_filename}:{f.f_lineno}" for f in _awaiting(task.get_coro())]
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            terminal = item.config.get_terminal_writer()
            terminal.line(f"\n+++ {item.nodeid} ran past its {settings.timeout:g}-s timeout +++", red=True)
            for line in where:
                terminal.line(line)
            terminal.flush()
        if where:  # in the failure too: a pytest-xdist worker's terminal is nobody's
            pytest.fail("\n".join([f"Timeout (>{settings.timeout:g}s) from pytest-timeout", *where]))
        fail_the_test(signum, frame)

    signal.signal(signal.SIGALRM, name_then_fail)


def _awaiting(coro) -> list:  # noqa: ANN001
    """The frames of a coroutine and of the coroutines it awaits, outermost first."""
    frames = []
    while coro is not None and getattr(coro, "cr_frame", None) is not None:
        frames.append(coro.cr_frame)
        coro = coro.cr_await
    return frames


def _png_bomb(width: int = 20_000, height: int = 20_000) -> bytes:
    """A valid 1-bit PNG of width x height zero pixels: about 50 KB on disk, 400 MP when decoded."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    row = b"\0" * (1 + (width + 7) // 8)
    packer = zlib.compressobj(9)
    idat = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


@pytest.fixture(scope="session")
def png_bomb() -> Callable[..., bytes]:
    """Makes decompression-bomb PNGs: `png_bomb()` is 20,000 x 20,000, `png_bomb(w, h)` any size."""
    return _png_bomb


@pytest.fixture
def hostile_image_catalog(tmp_path: Path, png_bomb: Callable[..., bytes]) -> Path:
    """A plain-CSV catalog in tmp_path/shop whose product OK-1 has a real PNG, HTML-1 an HTML page
    named .png, BOMB-1 a 20,000 x 20,000 PNG and DOT-1 the path ../.secret (a file that exists)."""
    folder = tmp_path / "shop"
    (folder / "images").mkdir(parents=True)
    shutil.copy(EXAMPLES / "images" / "aurora-lamp.png", folder / "images" / "good.png")
    (folder / "images" / "page.png").write_text("<html><script>alert(document.cookie)</script></html>")
    (folder / "images" / "bomb.png").write_bytes(png_bomb())
    (tmp_path / ".secret").write_text("s3cr3t")
    rows = (("OK-1", "images/good.png"), ("HTML-1", "images/page.png"), ("BOMB-1", "images/bomb.png"),
            ("DOT-1", "../.secret"))
    catalog = folder / "catalog.csv"
    catalog.write_text("product_id,title,description,image_url,price,currency,category\n"
                       + "".join(f"{pid},T {pid},d,{image},1.00,USD,Home\n" for pid, image in rows))
    return catalog


@pytest.fixture
def temporal_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No REELQUEUE_* or TEMPORAL_* variable from the session (the integration stack's home has its
    own stack.json) and no user Temporal profile file: each test sets what it configures."""
    import os

    for key in [k for k in os.environ if k.startswith(("REELQUEUE_", "TEMPORAL_"))]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("REELQUEUE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("HOME", str(tmp_path))
    return monkeypatch
