"""Ending the `reelqueue` process with the command's own exit status, never with a crash at exit.

Temporal's client runs on native (Rust core) threads that outlive the interpreter and have no close
call: when they touch Python while the interpreter finalizes, the process aborts with `Fatal Python
error: PyGILState_Release` (exit 134) after the command printed its result (temporalio/sdk-python
issue 300; the maintainers found no fix in the SDK). So once a command has talked to Temporal, the
process ends before finalization, the one part of a normal exit that is skipped.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
from collections.abc import Callable

EXIT_FAILURE = 1
TEMPORAL_RUNTIME = "temporalio.runtime"  # loaded by any command that builds a Temporal client


def run_and_exit(command: Callable[[], None]) -> None:
    """Run `command` (it may raise SystemExit) and end the process with its exit status.

    The hard exit is registered before the command runs, so atexit runs it after every handler the
    command registered and after the interpreter joined the command's threads: only what comes
    after atexit (the finalization that crashes) is skipped. Only a process's entry point may call
    it: in any other process (a test run calling the CLI in-process) it would end that process too,
    with this command's status."""
    outcome = {"status": EXIT_FAILURE}  # an exception that escapes `command` exits 1, as Python does
    atexit.register(_exit_before_finalizing, outcome)
    try:
        command()
        outcome["status"] = 0
    except SystemExit as exc:
        outcome["status"] = exit_status(exc)
        raise


def exit_status(exc: SystemExit) -> int:
    """The status the interpreter gives a SystemExit: None is 0, an int is itself, a message is 1."""
    if exc.code is None:
        return 0
    return exc.code if isinstance(exc.code, int) else EXIT_FAILURE


def _exit_before_finalizing(outcome: dict[str, int]) -> None:
    if TEMPORAL_RUNTIME not in sys.modules:
        return  # no native threads: the normal exit is safe
    logging.shutdown()  # registered before us, so atexit would run it after we are gone
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe or stream: nothing can reach it
            stream.flush()
    os._exit(outcome["status"])
