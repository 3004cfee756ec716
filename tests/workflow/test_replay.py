"""Kept workflow histories must replay on the current code (no server needed).

A change to a workflow that breaks one of these needs `workflow.patched(...)`, or running workflows
would fail on their next task after a deploy. The histories and how they are kept: histories.py.
"""

from collections import defaultdict
from pathlib import Path

import pytest
from histories import HISTORIES, events_of, history_name, kept_histories, read_history, signature
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from workflows.generation import GenerationWorkflow
from workflows.provider_gate import ProviderGateWorkflow
from workflows.renditions import RenditionsWorkflow

KEPT = kept_histories()


def test_there_are_histories():
    assert KEPT


def test_each_kept_history_is_a_distinct_event_sequence():
    kept: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for path in KEPT:
        kept[signature(events_of(path))].append(str(path.relative_to(HISTORIES)))
    assert [paths for paths in kept.values() if len(paths) > 1] == []


@pytest.mark.parametrize("path", KEPT, ids=[f"{p.parent.parent.name}/{p.parent.name}/{history_name(p)}" for p in KEPT])
async def test_history_replays(path: Path):
    replayer = Replayer(workflows=[GenerationWorkflow, ProviderGateWorkflow, RenditionsWorkflow],
                        data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(read_history(path), raise_on_replay_failure=True)
    assert result.replay_failure is None
