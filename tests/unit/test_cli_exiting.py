"""cli/exiting.py in a real process: the command's exit status, its output and its own atexit
handlers survive the early exit; only a process that loaded Temporal ends before finalization."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from cli.exiting import exit_status

SCRIPT = textwrap.dedent("""
    import atexit, sys
    from cli.exiting import run_and_exit

    def command():
        if {load_temporal}:
            import temporalio.runtime
        atexit.register(lambda: print("handler ran", flush=False))
        print("result", end="")  # no newline: still in the buffer when the command ends
        sys.stdout.write("\\n")
        {end}

    class Finalizer:  # a module global is destroyed during finalization, which the early exit skips
        def __del__(self):
            sys.stderr.write("finalized\\n")

    keep = Finalizer()
    run_and_exit(command)
""")


def run(load_temporal: bool, end: str) -> subprocess.CompletedProcess[str]:
    code = SCRIPT.format(load_temporal=load_temporal, end=end)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("end", "status"), [("pass", 0), ("raise SystemExit(3)", 3), ("raise SystemExit(None)", 0),
                                             ("raise SystemExit('bad usage')", 1), ("raise ValueError('x')", 1)])
def test_a_process_that_loaded_temporal_exits_with_the_commands_status_and_output(end, status):
    done = run(True, end)
    assert done.returncode == status, done.stderr
    assert done.stdout == "result\nhandler ran\n"  # flushed, and the command's own handler ran
    assert "finalized" not in done.stderr  # ended before finalization


def test_without_temporal_the_process_exits_normally():
    done = run(False, "raise SystemExit(2)")
    assert done.returncode == 2 and done.stdout == "result\nhandler ran\n"
    assert "finalized" in done.stderr


def test_exit_status_follows_the_interpreter():
    assert [exit_status(SystemExit(c)) for c in (None, 0, 4, "message")] == [0, 0, 4, 1]
