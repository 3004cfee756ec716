"""Recorded workflow histories for the replay test (test_replay.py): where each one goes, and
whether it is worth keeping (one file per distinct event sequence; tests/README.md says why).

A history is kept as `tests/fixtures/histories/<workflow>/<patch>/<test name>.json.gz`. Tests record
(`REELQUEUE_RECORD_HISTORIES=1`) through `keep_history` only.
"""

from __future__ import annotations

import base64
import functools
import gzip
import json
import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from temporalio.client import WorkflowHandle, WorkflowHistory

HISTORIES = Path(__file__).resolve().parents[1] / "fixtures" / "histories"
RECORD = os.environ.get("REELQUEUE_RECORD_HISTORIES") == "1"
SUFFIX = ".json.gz"
# The patch folder of a test that names none (its module's HISTORY_FOLDER, or a `histories` marker).
DEFAULT_PATCH = "renditions-v1"

Event = dict[str, Any]


def kept_histories() -> list[Path]:
    """Every kept history, in path order."""
    return sorted(HISTORIES.glob(f"*/*/*{SUFFIX}"))


def history_name(path: Path) -> str:
    """A kept file's test name: its file name without the suffix."""
    return path.name.removesuffix(SUFFIX)


def read_history(path: Path) -> WorkflowHistory:
    """A kept history, ready for `Replayer.replay_workflow`."""
    return WorkflowHistory.from_json(history_name(path), gzip.decompress(path.read_bytes()).decode())


def events_of(path: Path) -> list[Event]:
    """A kept history's events as JSON dicts."""
    return json.loads(gzip.decompress(path.read_bytes()))["events"]


def workflow_folder(events: list[Event]) -> str:
    """The folder of the history's workflow type: GenerationWorkflow -> generation,
    ProviderGateWorkflow -> provider_gate, RenditionsWorkflow -> renditions."""
    name = events[0]["workflowExecutionStartedEventAttributes"]["workflowType"]["name"]
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name.removesuffix("Workflow")).lower()


def _payload(attributes: dict, *path: str) -> Any:
    """The JSON value of the first payload at `path` in an event's attributes."""
    for key in path:
        attributes = attributes.get(key) or {}
    return json.loads(base64.b64decode(attributes["payloads"][0]["data"]))


def _detail(event: Event, own_queue: str) -> str:
    """What of one event the workflow's commands depend on, or replay compares them by: names and
    patch ids, never ids, times, identities or payload bytes. A timer's duration is left out: replay
    matches a timer by its place alone, and the durations here are jittered (workflow.random())."""
    attributes = next((v for k, v in event.items() if k.endswith("EventAttributes")), {})
    match event["eventType"].removeprefix("EVENT_TYPE_"):
        case "WORKFLOW_EXECUTION_STARTED" | "START_CHILD_WORKFLOW_EXECUTION_INITIATED":
            return attributes["workflowType"]["name"]
        case "WORKFLOW_TASK_COMPLETED":  # the SDK flags a task recorded change how the SDK replays
            sdk = attributes.get("sdkMetadata") or {}
            return f"core{sorted(sdk.get('coreUsedFlags', []))} lang{sorted(sdk.get('langUsedFlags', []))}"
        case "ACTIVITY_TASK_SCHEDULED":  # its queue relative to the workflow's (task-queues-v1)
            queue = attributes["taskQueue"]["name"].replace(own_queue, "<own>")
            return f"{attributes['activityType']['name']} on {queue}"
        case "MARKER_RECORDED":
            name = attributes["markerName"]
            if name == "core_patch":
                return f"{name} {_payload(attributes, 'details', 'patch-data')['id']}"
            if name == "core_local_activity":
                return f"{name} {_payload(attributes, 'details', 'data')['activity_type']}"
            return name
        case "WORKFLOW_EXECUTION_SIGNALED" | "SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED":
            return attributes["signalName"]
        case "WORKFLOW_EXECUTION_UPDATE_ACCEPTED":
            return attributes["acceptedRequest"]["input"]["name"]
        case "UPSERT_WORKFLOW_SEARCH_ATTRIBUTES":
            return ",".join(sorted(attributes["searchAttributes"]["indexedFields"]))
    return ""


def signature(events: list[Event]) -> tuple[str, ...]:
    """The history's event sequence: each event's type and `_detail`. Two histories of one
    signature give the workflow the same events in the same order, so they replay alike."""
    own_queue = events[0]["workflowExecutionStartedEventAttributes"]["taskQueue"]["name"]
    return tuple(f"{e['eventType'].removeprefix('EVENT_TYPE_')} {_detail(e, own_queue)}".rstrip()
                 for e in events)


@functools.cache
def _file_signature(path: Path, _mtime_ns: int) -> tuple[str, ...]:
    return signature(events_of(path))


def matching(events: list[Event], paths: Iterable[Path]) -> Path | None:
    """The first of `paths` whose history has the signature of `events`."""
    wanted = signature(events)
    return next((p for p in paths if _file_signature(p, p.stat().st_mtime_ns) == wanted), None)


def write_history(events: list[Event], path: Path) -> None:
    """Compact JSON, gzipped (a tenth of the indented JSON; `zcat` reads it), no timestamp inside."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps({"events": events}, separators=(",", ":")).encode(), mtime=0))


def keep_history(history: WorkflowHistory, patch: str, name: str) -> Path | None:
    """Keep a recorded history for the replay test as `<workflow>/<patch>/<name>.json.gz`, unless a
    kept history has its signature (then say which on stderr). A kept file is never written over:
    a new sequence under a taken name gets `-2`, `-3`, ... The path written, or None."""
    events = json.loads(history.to_json())["events"]
    match = matching(events, kept_histories())
    if match is not None:
        sys.stderr.write(f"history of {name} matches kept {match.relative_to(HISTORIES)}, not recorded\n")
        return None
    folder = HISTORIES / workflow_folder(events) / patch
    path = folder / f"{name}{SUFFIX}"
    n = 1
    while path.exists():
        n += 1
        path = folder / f"{name}-{n}{SUFFIX}"
    write_history(events, path)
    sys.stderr.write(f"history of {name} recorded as {path.relative_to(HISTORIES)}\n")
    return path


async def record(handle: WorkflowHandle, patch: str, name: str) -> Path | None:
    """With `REELQUEUE_RECORD_HISTORIES=1`, keep the history of `handle`'s run (`keep_history`)."""
    return keep_history(await handle.fetch_history(), patch, name) if RECORD else None


async def history_lengths(handles: Iterable[WorkflowHandle]) -> list[int]:
    """How many events each handle's run has now (what a long wait grows)."""
    return [(await h.describe()).raw_description.workflow_execution_info.history_length for h in handles]
