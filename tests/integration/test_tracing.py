"""One task's trace on the real stack: from the start that `run` makes, through every activity and
provider call, with the provider's request key and job id on the spans and no secret anywhere."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from stack_helpers import import_small, run_all, serving

from adapters.temporal_client import connect
from telemetry import tracing
from telemetry.redaction import secrets_of

pytestmark = pytest.mark.integration

# prepare (validate and reserve), submit, status, fetch, and the media step (proxy, renditions, settle)
STEPS = {"prepare_task", "submit", "poll_job", "fetch_output", "make_media"}


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.activate(provider)
    try:
        yield exporter
    finally:
        tracing.deactivate()


async def test_one_task_is_one_trace_through_every_step(stack, tmp_path, spans):
    client = await connect(stack)  # after activate: the client and its worker carry the interceptor
    summary = import_small(stack, tmp_path, [("TR-1", "Traced Lamp", "A lamp")])
    queue = f"trace-{tmp_path.name[-12:]}"
    async with serving(client, stack, queue):
        (task,) = await run_all(client, stack, summary.import_id, queue)
    assert task.status == "SUCCEEDED"

    finished = spans.get_finished_spans()
    (start,) = [s for s in finished if s.name == "StartWorkflow:GenerationWorkflow"
                and s.attributes.get("temporalWorkflowID") == task.workflow_id]
    trace_id = start.context.trace_id
    mine = [s for s in finished if s.context.trace_id == trace_id]
    assert start.parent is None  # the start is the root: the task's trace begins where `run` started it
    ran = {s.name.removeprefix("RunActivity:") for s in mine if s.name.startswith("RunActivity:")}
    assert ran >= STEPS, sorted(ran)

    submit = next(s for s in mine if s.name == "RunActivity:submit")
    assert submit.attributes["reelqueue.request_key"].startswith(task.id)
    job_id = submit.attributes["reelqueue.job_id"]
    polls = [s for s in mine if s.name == "RunActivity:poll_job"]
    assert all(s.attributes["reelqueue.job_id"] == job_id for s in polls)
    # The provider calls are spans of their own under the activities that made them.
    by_id = {s.context.span_id: s for s in mine}
    http = [s for s in mine if s.attributes.get("http.request.method") or s.attributes.get("http.method")]
    parents = {by_id[s.parent.span_id].name for s in http if s.parent and s.parent.span_id in by_id}
    assert {"RunActivity:submit", "RunActivity:poll_job", "RunActivity:fetch_output"} <= parents, parents

    assert any(s.attributes.get("db.system") == "postgresql" for s in mine)  # the ledger's statements
    urls = [s.attributes.get("url.full") or s.attributes.get("http.url") for s in http]
    assert urls and all("?" not in url or "?[redacted]" in url for url in urls), urls  # signed URLs' tokens
    text = repr([(s.name, dict(s.attributes), [dict(e.attributes) for e in s.events]) for s in mine])
    for secret in filter(None, secrets_of(stack)):
        assert secret not in text
