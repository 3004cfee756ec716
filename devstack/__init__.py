"""The embedded stack behind `reelqueue dev up|down|status`.

Postgres, S3 (SeaweedFS), Temporal + Web UI, the provider emulator, the gateway and the worker
run as detached processes with state under $REELQUEUE_HOME; the ports they got are written to
$REELQUEUE_HOME/stack.json, which config.Settings reads, so every process finds them.
"""

from .errors import StackError
from .models import ServiceStatus, StackStatus
from .paths import mark_worker_ready, stack_paths, worker_ready_file
from .postgres import ensure_database
from .services import SEARCH_ATTRIBUTES
from .stack import (
    down,
    kill_service,
    restart_service,
    running_pid,
    service_names,
    status,
    up,
    up_timed,
)
from .stackfile import effective_settings

__all__ = [
    "SEARCH_ATTRIBUTES",
    "ServiceStatus",
    "StackError",
    "StackStatus",
    "down",
    "effective_settings",
    "ensure_database",
    "kill_service",
    "mark_worker_ready",
    "restart_service",
    "running_pid",
    "service_names",
    "stack_paths",
    "status",
    "up",
    "up_timed",
    "worker_ready_file",
]
