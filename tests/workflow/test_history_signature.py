"""Which recorded histories are kept (histories.py): a history recorded again, with other times, ids
and payloads, has the signature of the kept one; another activity, patch or queue does not; and a
kept file is never written over."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import histories
import pytest
from histories import HISTORIES, Event, events_of, keep_history, signature, workflow_folder
from temporalio.client import WorkflowHistory

# A RenditionsWorkflow run: a patch marker, a search attribute upsert, one activity on the media queue.
SMALL = HISTORIES / "renditions" / "task-queues-v1" / "renditions-workflow-media-queue.json.gz"
QUEUE = "rend-58b4ec03"


def encoded(value: Any) -> str:
    return base64.b64encode(json.dumps(value).encode()).decode()


def _other_payloads(node: Any) -> None:
    """Every payload's bytes replaced, except a marker's (they hold what replay compares)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "payloads":
                for payload in value:
                    payload["data"] = encoded({"other": "bytes"})
            elif key != "markerRecordedEventAttributes":
                _other_payloads(value)
    elif isinstance(node, list):
        for item in node:
            _other_payloads(item)


def recorded_again(events: list[Event]) -> list[Event]:
    """The same run recorded at another time, by another worker, on another queue, other payloads."""
    text = json.dumps(events).replace("2026-", "2027-").replace(QUEUE, "rend-0000aaaa")
    again = json.loads(text.replace('"identity": "', '"identity": "other-'))
    for event in again:
        event["eventId"] = str(int(event["eventId"]) + 100)
    _other_payloads(again)
    return again


def attributes(events: list[Event], event_type: str) -> dict:
    event = next(e for e in events if e["eventType"] == f"EVENT_TYPE_{event_type}")
    return next(v for k, v in event.items() if k.endswith("EventAttributes"))


@pytest.fixture
def events() -> list[Event]:
    return events_of(SMALL)


def test_a_run_recorded_again_has_the_kept_ones_signature(events):
    again = recorded_again(events)
    assert json.dumps(again) != json.dumps(events)
    assert QUEUE not in json.dumps(again)
    assert signature(again) == signature(events)


def test_another_activity_is_another_sequence(events):
    other = copy.deepcopy(events)
    attributes(other, "ACTIVITY_TASK_SCHEDULED")["activityType"]["name"] = "transcode"
    assert signature(other) != signature(events)


def test_an_activity_on_the_workflows_own_queue_is_another_sequence(events):
    other = copy.deepcopy(events)
    attributes(other, "ACTIVITY_TASK_SCHEDULED")["taskQueue"]["name"] = QUEUE
    assert signature(other) != signature(events)


def test_another_patch_is_another_sequence(events):
    other = copy.deepcopy(events)
    patch = attributes(other, "MARKER_RECORDED")["details"]["patch-data"]["payloads"][0]
    assert json.loads(base64.b64decode(patch["data"])) == {"id": "task-queues-v1", "deprecated": False}
    patch["data"] = encoded({"id": "renditions-v1", "deprecated": False})
    assert signature(other) != signature(events)


def test_a_local_activity_of_another_type_is_another_sequence():
    events = events_of(next((HISTORIES / "generation" / "patch-baseline-v1").iterdir()))
    other = copy.deepcopy(events)
    marker = next(a for a in (e.get("markerRecordedEventAttributes") for e in other)
                  if a and a["markerName"] == "core_local_activity")
    data = marker["details"]["data"]["payloads"][0]
    data["data"] = encoded({**json.loads(base64.b64decode(data["data"])), "activity_type": "validate_task"})
    assert signature(other) != signature(events)
    assert signature(recorded_again(events)) == signature(events)


def test_the_folder_is_the_workflow_type():
    folders = {workflow_folder(events_of(path)) for path in histories.kept_histories()}
    assert folders == {"generation", "provider_gate", "renditions"}
    assert {path.parent.parent.name for path in histories.kept_histories()} == folders


def _history(events: list[Event]) -> WorkflowHistory:
    return WorkflowHistory.from_json("wf", json.dumps({"events": events}))


def test_a_repeat_is_not_recorded_and_says_which_it_matched(events, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(histories, "HISTORIES", tmp_path)
    kept = keep_history(_history(events), "task-queues-v1", "first")
    assert kept == tmp_path / "renditions" / "task-queues-v1" / "first.json.gz"
    assert events_of(kept) == json.loads(_history(events).to_json())["events"]
    assert keep_history(_history(recorded_again(events)), "later-v1", "second") is None
    said = capsys.readouterr().err
    assert "history of second matches kept renditions/task-queues-v1/first.json.gz, not recorded" in said
    assert list(tmp_path.rglob("*.gz")) == [kept]


def test_a_kept_file_is_never_written_over(events, tmp_path, monkeypatch):
    monkeypatch.setattr(histories, "HISTORIES", tmp_path)
    first = keep_history(_history(events), "task-queues-v1", "name")
    other = copy.deepcopy(events)
    attributes(other, "ACTIVITY_TASK_SCHEDULED")["activityType"]["name"] = "transcode"
    second = keep_history(_history(other), "task-queues-v1", "name")
    assert second == first.with_name("name-2.json.gz")
    assert signature(events_of(first)) == signature(events)
