"""Structured logs: one JSON object per line (or the same fields as text for a person at a terminal),
from the worker, the gateway and the CLI, every line redacted (telemetry/redaction.py).

Fields: time, level, service, logger, message, and where known task_id, workflow_id, run_id,
attempt, activity, provider, request_id (docs/observability.md). Temporal's activity and workflow
loggers carry the execution's ids; `bound(...)` adds others (the gateway's request id, a provider)
for the code that runs inside it.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Literal

from contracts.tenant_text import escaped_json, shown
from telemetry.redaction import add_secrets, redact, secrets_of

LogFormat = Literal["json", "text"]
FORMATS: tuple[str, ...] = ("json", "text")
_bound: ContextVar[dict[str, Any] | None] = ContextVar("log_fields", default=None)
# contracts/workflow_api.py: workflow_id (gen-{task}[-run{n}]) and renditions_id (renditions-{task})
_TASK_OF_WORKFLOW = re.compile(r"^(?:gen-(?P<task>.+?)(?:-run\d+)?|renditions-(?P<again>.+))$")
_QUIET = {"httpx": logging.WARNING, "httpcore": logging.WARNING}  # a line per HTTP request
_ORDER = ("time", "level", "service", "logger", "message", "task_id", "workflow_id", "run_id", "attempt",
          "activity", "provider", "request_id")


@contextmanager
def bound(**fields: Any) -> Iterator[None]:
    """Adds `fields` to every line logged inside (this task or thread's context only)."""
    token = _bound.set({**(_bound.get() or {}), **_known(fields)})
    try:
        yield
    finally:
        _bound.reset(token)


def bind(**fields: Any) -> None:
    """Adds `fields` to the innermost `bound` block, in place: an activity's thread runs in a copy of
    the context, so this is how its provider reaches the interceptor's closing line. Outside any
    block (an activity's method called directly, as tests do) it adds nothing: setting the fields
    there would leave them on every later line of that thread."""
    current = _bound.get()
    if current is not None:
        current.update(_known(fields))


def _known(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def task_of_workflow(workflow_id: str | None) -> str | None:
    match = _TASK_OF_WORKFLOW.match(workflow_id or "")
    return (match.group("task") or match.group("again")) if match else None


def _execution_fields(record: logging.LogRecord) -> dict[str, Any]:
    """Ids Temporal put on the record (its activity and workflow loggers), else those of the
    activity running in this context (any logger called inside one)."""
    info = getattr(record, "temporal_activity", None) or getattr(record, "temporal_workflow", None)
    if info is None:
        from temporalio import activity

        if not activity.in_activity():
            return {}
        current = activity.info()
        info = {"workflow_id": current.workflow_id, "run_id": current.workflow_run_id,
                "attempt": current.attempt, "activity_type": current.activity_type}
    workflow_id = info.get("workflow_id")
    return {"workflow_id": workflow_id, "run_id": info.get("run_id") or info.get("workflow_run_id"),
            "attempt": info.get("attempt"), "activity": info.get("activity_type"),
            "task_id": task_of_workflow(workflow_id)}


class StructuredFormatter(logging.Formatter):
    """JSON lines, or `time level service logger: message key=value ...`; both redacted, and both
    with control and bidi characters escaped (a message may carry a tenant's text: contracts/tenant_text.py)."""

    def __init__(self, service: str, fmt: LogFormat = "json"):
        super().__init__()
        self.service, self.fmt = service, fmt

    def fields(self, record: logging.LogRecord) -> dict[str, Any]:
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        found: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(), "service": self.service, "logger": record.name,
            "message": redact(message),
        }
        found.update({k: v for k, v in _execution_fields(record).items() if v is not None})
        found.update(_bound.get() or {})
        found.update(getattr(record, "fields", None) or {})  # logger.info(..., extra={"fields": {...}})
        return {k: found[k] for k in (*_ORDER, *sorted(set(found) - set(_ORDER))) if k in found}

    def format(self, record: logging.LogRecord) -> str:
        fields = self.fields(record)
        if self.fmt == "json":
            return escaped_json(json.dumps(fields, default=str, ensure_ascii=False))
        head = " ".join(str(fields.pop(k)) for k in ("time", "level", "service"))
        logger, message = fields.pop("logger"), fields.pop("message")
        tail = " ".join(f"{k}={redact(str(v))}" for k, v in fields.items())
        return shown(f"{head} {logger}: {message}" + (f" {tail}" if tail else ""))


def configure_logging(service: str, fmt: LogFormat = "json", *, level: str | int = "INFO",
                      settings: Any = None) -> None:
    """The process's one handler (stderr) on the root logger; the secrets of `settings` are
    redacted from every line. Replaces the plain stream handlers set before (basicConfig's, its own
    from an earlier call) and keeps any other kind (a test runner's capture)."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if settings is not None:
        add_secrets(secrets_of(settings))
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(StructuredFormatter(service, fmt))
    handler.setLevel(level)
    root = logging.getLogger()
    for old in list(root.handlers):
        if type(old) is logging.StreamHandler or isinstance(old.formatter, StructuredFormatter):
            root.removeHandler(old)
    root.addHandler(handler)
    if root.getEffectiveLevel() > handler.level:  # lowered when asked for more, never raised: other
        root.setLevel(handler.level)               # handlers (a test's capture) keep what they saw
    for name, floor in _QUIET.items():
        logging.getLogger(name).setLevel(floor)


def is_configured() -> bool:
    """Whether `configure_logging` set this process's handler."""
    return any(isinstance(h.formatter, StructuredFormatter) for h in logging.getLogger().handlers)
