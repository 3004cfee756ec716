"""Recorded workflow histories must replay on the current code (no server needed).

A change to GenerationWorkflow that breaks one of these needs `workflow.patched(...)`, or running
workflows would fail on their next task after a deploy.
"""

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from workflows.generation import GenerationWorkflow
from workflows.provider_gate import ProviderGateWorkflow
from workflows.renditions import RenditionsWorkflow

# One folder per workflow version: histories recorded by earlier versions must keep replaying.
HISTORIES = sorted((Path(__file__).resolve().parents[1] / "fixtures" / "histories").glob("*/*.json"))


def test_there_are_histories():
    assert HISTORIES


@pytest.mark.parametrize("path", HISTORIES, ids=[f"{p.parent.name}/{p.stem}" for p in HISTORIES])
async def test_history_replays(path: Path):
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    replayer = Replayer(workflows=[GenerationWorkflow, ProviderGateWorkflow, RenditionsWorkflow],
                        data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=True)
    assert result.replay_failure is None
