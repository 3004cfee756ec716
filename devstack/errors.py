"""The one error the stack manager raises: it names the service and shows its log tail."""

from __future__ import annotations


class StackError(RuntimeError):
    """A service could not be prepared, started or reached."""
