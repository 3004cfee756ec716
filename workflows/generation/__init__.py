"""GenerationWorkflow, one durable workflow per video task: the workflow (`workflow.py`) and the parts it
is made of, each deciding one thing (docs/architecture.md, "The generation workflow in parts")."""

from workflows.generation.workflow import GenerationWorkflow

__all__ = ["GenerationWorkflow"]
