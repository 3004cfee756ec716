"""The real worker and gateway processes of `dev up`: JSON log lines with the task's ids, no secret or
token in either log, and the Temporal SDK's metrics in the same scrape as reelqueue's."""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path

import httpx
import pytest
from stack_helpers import gateway_log_after, import_small, run_all, stop_gates_of

import devstack
from config.settings import Settings
from delivery.links import LinkSigner
from metrics.sdk import IDLE_SIGNALS, TUNING_SIGNALS
from schema import queries
from schema.db import Database
from telemetry.redaction import secrets_of

pytestmark = pytest.mark.integration

# The worker-tuning signals as a scrape names them (a counter ends in _total, a histogram has _bucket series).
SDK_SIGNALS = [name + {"counter": "_total", "histogram": "_bucket", "gauge": ""}[kind]
               for name, kind in TUNING_SIGNALS.items() if name not in IDLE_SIGNALS]


def _lines(path: Path, offset: int) -> list[dict]:
    with path.open("rb") as handle:
        handle.seek(offset)
        text = handle.read().decode()
    # every line but devstack's start marks ("=== time start: command") parses: one JSON object each
    return [json.loads(line) for line in text.splitlines() if line.strip() and not line.startswith("=== ")]


@pytest.mark.timeout(240)
async def test_a_task_through_the_real_worker_logs_json_with_its_ids_and_no_secret(stack, client, tmp_path):
    logs = Path(stack.home) / "logs"
    worker_log = logs / "worker.log"
    start = worker_log.stat().st_size if worker_log.exists() else 0
    summary = import_small(stack, tmp_path, [("LOG-1", "Logged Lamp", "A lamp")])
    devstack.up(stack, services=["worker"])
    try:
        (task,) = await run_all(client, stack, summary.import_id, stack.task_queue)
        scrape = httpx.get(f"http://127.0.0.1:{Settings().worker_metrics_port}/metrics", timeout=10).text
    finally:
        devstack.kill_service(stack, "worker", signal.SIGTERM)
        await stop_gates_of(client, stack.task_queue)
    assert task.status == "SUCCEEDED"

    lines = _lines(worker_log, start)
    assert all({"time", "level", "service", "logger", "message"} <= set(line) for line in lines)
    assert {line["service"] for line in lines} == {"worker"}
    done = [line for line in lines if line["logger"] == "reelqueue.activity" and line.get("task_id") == task.id]
    history = [e async for e in client.get_workflow_handle(task.workflow_id).fetch_history_events()]
    kind = {e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name for e in history
            if e.HasField("activity_task_scheduled_event_attributes")}
    completed = Counter(kind[e.activity_task_completed_event_attributes.scheduled_event_id] for e in history
                        if e.HasField("activity_task_completed_event_attributes"))
    logged_ok = Counter(line["activity"] for line in done
                        if line["result"] == "ok" and line["activity"] in kind.values())  # not local activities
    assert logged_ok == completed and {"submit", "fetch_output"} <= set(completed), (logged_ok, completed)
    assert {"prepare_task", "make_media"} <= set(completed), completed  # lean-path-v1: no local step on the way
    assert all(line["workflow_id"] == task.workflow_id and line["run_id"] and line["attempt"] >= 1 for line in done)
    assert {line.get("provider") for line in done if line["activity"] in ("submit", "poll_job")} == {task.provider}

    # The gateway: a signed media link for the task's video, and the provider's webhooks for its job.
    with Database(stack.database_url).transaction() as session:
        proxy = next(a for a in queries.task_detail(session, task.id)["assets"] if a["kind"] == "PROXY")
    link = LinkSigner.from_settings(stack).link(proxy["key"], 3600).url
    assert httpx.get(link, headers={"X-Request-ID": f"logs-{task.id[:12]}"}, timeout=10).status_code == 200
    gateway_text = gateway_log_after(stack, f"logs-{task.id[:12]}")
    gateway_lines = [json.loads(line) for line in gateway_text.splitlines() if line.startswith("{")]
    assert any(line.get("request_id") == f"logs-{task.id[:12]}" and line["service"] == "gateway"
               for line in gateway_lines)

    media_token = link.split("/media/")[1].split("/")[0]
    texts = {"worker": worker_log.read_bytes()[start:].decode(), "gateway": gateway_text,
             "emulator": (logs / "emulator.log").read_text()}  # it fetched the presigned input image
    for secret in [*filter(None, secrets_of(stack)), media_token, *media_token.split("."), "X-Amz-Signature="]:
        for name, text in texts.items():
            leaked = secret in text  # a boolean: a failure names the log, never the secret
            assert not leaked, (name, secret[:4])

    assert "reelqueue_activity_seconds_bucket" in scrape  # one scrape: ours and the SDK's
    for name in SDK_SIGNALS:
        assert f"\n{name}{{" in scrape, name
