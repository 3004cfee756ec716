"""The workflows as versioned workers register them (Worker Versioning, docs/deploy.md "Rolling
deploys"): the same types, names and code, each saying how a run moves between builds. The server
refuses a versioning behaviour from an unversioned worker, so unversioned workers (the embedded stack,
the tests) register the plain classes and versioned ones these."""

from __future__ import annotations

from temporalio import workflow
from temporalio.common import VersioningBehavior

with workflow.unsafe.imports_passed_through():
    from contracts import workflow_api as api
    from contracts.admission import GateInput
    from contracts.messages import GenerationInput, GenerationOutcome, RenditionsResult, TranscodeInput

from workflows.generation import GenerationWorkflow
from workflows.provider_gate import ProviderGateWorkflow
from workflows.renditions import RenditionsWorkflow


@workflow.defn(name=api.WORKFLOW_NAME, versioning_behavior=VersioningBehavior.PINNED)
class PinnedGenerationWorkflow(GenerationWorkflow):
    """A task's run finishes on the build it started on: a new build never replays its history."""

    @workflow.run
    async def run(self, inp: GenerationInput) -> GenerationOutcome:
        return await super().run(inp)


@workflow.defn(name=api.RENDITIONS_WORKFLOW_NAME, versioning_behavior=VersioningBehavior.PINNED)
class PinnedRenditionsWorkflow(RenditionsWorkflow):
    """Short, started by a generation run: it stays with it."""

    @workflow.run
    async def run(self, inp: TranscodeInput) -> RenditionsResult:
        return await super().run(inp)


@workflow.defn(name=api.GATE_WORKFLOW_NAME, versioning_behavior=VersioningBehavior.AUTO_UPGRADE)
class AutoUpgradeGateWorkflow(ProviderGateWorkflow):
    """One gate per provider runs for good: it moves to the current build at its next workflow task,
    so its changes stay behind workflow.patched, as every workflow change must."""

    @workflow.run
    async def run(self, inp: GateInput) -> None:
        await super().run(inp)


VERSIONED_WORKFLOWS = [PinnedGenerationWorkflow, AutoUpgradeGateWorkflow, PinnedRenditionsWorkflow]
