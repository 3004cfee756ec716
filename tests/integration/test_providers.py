"""Each hosted provider adapter end to end on the real stack, against the emulator's dialect of it.

One case per provider, each checking several things with the emulator's runtime faults: a task
runs to SUCCEEDED with a real MP4 and the provider's price settled; the content filter's refusal
ends FAILED_FINAL as moderation; the provider's 429 (with its retry header) and a 5xx in its own
error shape are retried; an unknown submit is reconciled where the provider can be asked and
waits for a person where it cannot; a cancel stops the job at the provider; webhooks where the
provider signs them; and no configured key shows up in logs, state events or `show --json`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from cli_helpers import run_cli_async
from sqlalchemy import select
from stack_helpers import assert_ledger_balanced, make_catalog, serving, wait_for_status

from adapters.storage import ObjectStorage
from catalog.plan import load_plan
from catalog.service import run_import
from contracts.messages import CancelRequest, ResolveAction, ResolveRequest
from control.resolve import resolve_task
from control.starting import start_workflows
from schema import queries
from schema.db import Database
from schema.models import Attempt, ProviderEvent
from workflows.generation import GenerationWorkflow

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Case:
    provider: str
    model: str
    duration_s: int
    price_per_s: float  # the adapter's default price table
    reconciles: bool  # an unknown submit is found again at the provider
    webhooks: bool = False  # signed webhooks reach the gateway
    cancels: bool = True  # the provider can stop a job (else it runs on and the video wins)


CASES = [
    Case("runway", "gen4_turbo", 2, 0.05, reconciles=False),
    Case("replicate", "kwaivgi/kling-v2.1", 5, 0.05, reconciles=True, webhooks=True),
    Case("kling", "kling-v2-1", 5, 0.056, reconciles=True, cancels=False),
    Case("luma", "ray-flash-2", 5, 0.048, reconciles=True, cancels=False),
    Case("fal", "fal-ai/kling-video/v2.1/standard/image-to-video", 5, 0.05, reconciles=False),
]
PRODUCTS = {
    "ok": "Desk Lamp", "moderated": "forbidden-content Vase", "r429": "Kettle", "r5xx": "Teapot",
    "unknown": "Mirror", "cancel": "Clock",
}


def _plan(folder: Path, case: Case) -> Path:
    cost = case.price_per_s * case.duration_s + 1
    path = folder / "plan.toml"
    path.write_text(f"""
name = "p-{case.provider}"
locales = ["en-US"]
aspect_ratios = ["9:16"]
[[variants]]
id = "a"
hook = {{ "en-US" = "Now" }}
[[templates]]
id = "tpl"
version = "tpl-v1"
duration_s = {case.duration_s}
provider = "{case.provider}"
model = "{case.model}"
cost_estimate = {cost}
[templates.prompts]
"en-US" = "Product shot of {{title}}. {{hook}}"
""")
    return path


def _stats(stack) -> dict:
    return httpx.get(f"{stack.emulator_url}/_sim/stats", timeout=10).json()


def _faults(stack, **values) -> None:
    httpx.post(f"{stack.emulator_url}/_sim/faults", json=values, timeout=10).raise_for_status()


async def _first_attempt(db: Database, task_id: str, states: set[str], timeout_s: float = 30) -> Attempt:
    for _ in range(int(timeout_s * 10)):
        with db.transaction() as session:
            attempt = session.scalar(select(Attempt).where(Attempt.task_id == task_id, Attempt.attempt_no == 1))
            if attempt is not None and attempt.submit_state in states:
                return attempt
        await asyncio.sleep(0.1)
    pytest.fail(f"attempt 1 of {task_id} never reached {states}")


@pytest.mark.parametrize("case", CASES, ids=[c.provider for c in CASES])
async def test_provider_end_to_end(case: Case, stack, client, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    secret = f"rq-secret-{case.provider}-{uuid.uuid4().hex}"
    # A real-looking key on the emulated provider, and a short submit timeout for the lost answer.
    settings = stack.model_copy(update={f"{case.provider}_api_key": secret, "provider_submit_timeout_s": 3.0})
    db = Database(settings.database_url)
    catalog = make_catalog(tmp_path, [(f"{case.provider}-{k}", title, f"A {title}") for k, title in PRODUCTS.items()])
    summary = run_import(settings, catalog, load_plan(_plan(tmp_path, case)), catalog=f"cat-{tmp_path.name}")
    with db.transaction() as session:
        tasks = {t.product_id.split("-", 1)[1]: t for t in queries.list_tasks(session, summary.import_id)}
    queue = f"test-{uuid.uuid4().hex[:12]}"
    async with serving(client, settings, queue):
        _faults(stack, submit_status=429, submit_status_count=1)
        await start_workflows(client, [tasks["r429"]], summary.import_id, queue)
        await _first_attempt(db, tasks["r429"].id, {"FAILED_BEFORE_ACCEPT"})
        _faults(stack, submit_status=503, submit_status_count=1)
        await start_workflows(client, [tasks["r5xx"]], summary.import_id, queue)
        await _first_attempt(db, tasks["r5xx"].id, {"FAILED_BEFORE_ACCEPT"})
        _faults(stack, submit_hang_after_create=1)
        await start_workflows(client, [tasks["unknown"]], summary.import_id, queue)
        await _first_attempt(db, tasks["unknown"].id, {"UNKNOWN", "ACKED", "RUNNING", "SUCCEEDED"})
        stats_before = _stats(stack)
        if case.webhooks:
            _faults(stack, bad_signature=1)  # the next event is signed with a wrong key: refused
        await start_workflows(client, [tasks[k] for k in ("ok", "moderated", "cancel")], summary.import_id, queue)
        await wait_for_status(settings, tasks["cancel"].id, {"SUBMITTED", "RUNNING"})
        await client.get_workflow_handle_for(GenerationWorkflow.run, tasks["cancel"].workflow_id).signal(
            "cancel", CancelRequest(reason="test"))

        ended = {"SUCCEEDED", "FAILED_FINAL", "CANCELED", "NEEDS_ATTENTION"}
        final = {k: await wait_for_status(settings, t.id, ended, timeout_s=120) for k, t in tasks.items()}
        if not case.reconciles:
            assert final["unknown"] == "NEEDS_ATTENTION"
            await resolve_task(settings, tasks["unknown"].id, ResolveRequest(action=ResolveAction.FAIL,
                                                                           reason="test: cannot ask", by="test"))
            final["unknown"] = await wait_for_status(settings, tasks["unknown"].id, {"FAILED_FINAL"})
        await asyncio.gather(*(client.get_workflow_handle(t.workflow_id).result() for t in tasks.values()),
                             return_exceptions=True)

    assert final == {"ok": "SUCCEEDED", "moderated": "FAILED_FINAL", "r429": "SUCCEEDED", "r5xx": "SUCCEEDED",
                     "unknown": "SUCCEEDED" if case.reconciles else "FAILED_FINAL",
                     "cancel": "CANCELED" if case.cancels else "SUCCEEDED"}
    details = {}
    for key, task in tasks.items():
        with db.transaction() as session:
            details[key] = queries.task_detail(session, task.id)
    ok = details["ok"]
    assert [a["provider"] for a in ok["attempts"]] == [case.provider]
    raw = next(a for a in ok["assets"] if a["kind"] == "RAW_OUTPUT")
    assert raw["codec"] == "h264" and raw["duration_s"] == pytest.approx(case.duration_s, abs=0.3)
    head = ObjectStorage.from_settings(settings).presigned_url(raw["key"])
    assert httpx.get(head, headers={"Range": "bytes=0-11"}, timeout=10).content[4:8] == b"ftyp"
    settled = sum(e["amount"] for e in ok["ledger"] if e["type"] == "SETTLE")
    assert settled == pytest.approx(case.price_per_s * case.duration_s)

    assert details["moderated"]["task"]["last_error_class"] == "moderation"
    for key, status in (("r429", 429), ("r5xx", 503)):
        first, last = details[key]["attempts"][0], details[key]["attempts"][-1]
        assert (first["http_status"], first["submit_state"], last["submit_state"]) == (
            status, "FAILED_BEFORE_ACCEPT", "SUCCEEDED")
    unknown = details["unknown"]["attempts"][0]
    if case.reconciles:
        assert unknown["provider_job_id"] and len(details["unknown"]["attempts"]) == 1
    else:
        assert unknown["submit_state"] == "ABANDONED"
        assert any(e["to"] == "NEEDS_ATTENTION" for e in details["unknown"]["events"])
    if case.webhooks:
        stats = _stats(stack)
        assert stats["webhooks_refused"] > stats_before["webhooks_refused"]  # the gateway's 401
        with db.transaction() as session:
            verified = session.scalars(select(ProviderEvent).where(
                ProviderEvent.provider == case.provider, ProviderEvent.task_id == tasks["ok"].id)).all()
        assert verified and all(e.verified for e in verified)
        assert any(e.payload.get("status") == "succeeded" for e in verified)
    cancel_job = details["cancel"]["attempts"][-1]["provider_job_id"].rsplit("/", 1)[-1]  # fal: app/requests/id
    sim = {j["id"]: j for j in httpx.get(f"{stack.emulator_url}/_sim/jobs", timeout=10).json()["jobs"]}
    assert sim[cancel_job]["status"] == ("canceled" if case.cancels else "succeeded")
    if not case.cancels:
        assert details["cancel"]["task"]["cancel_outcome"] == "TOO_LATE"
    assert_ledger_balanced(settings, [t.id for k, t in tasks.items() if k != "unknown"])

    # No configured key anywhere: show --json, state events, this process's logs, the stack's logs.
    shown = [(await run_cli_async("show", t.id, "--json")) for t in tasks.values()]
    assert all(r.code == 0 and r.json["task"]["provider"] == case.provider for r in shown)
    shown = [r.stdout + r.stderr for r in shown]
    logs = [p.read_text(errors="replace") for p in (Path(settings.home) / "logs").glob("*.log")]
    assert all(secret not in text for text in [*shown, caplog.text, *logs, str(details)])
    check = await run_cli_async("providers", "check", case.provider, "--json")  # the session's emulated key
    assert check.code == 0 and check.json["ok"] and check.json["reachable"]


async def test_a_provider_without_a_key_ends_invalid_naming_the_variable(stack, client, tmp_path):
    settings = stack.model_copy(update={"emulate_providers": False})  # as without --emulate-providers
    db = Database(settings.database_url)
    catalog = make_catalog(tmp_path, [("nokey-1", "Lamp", "A lamp")])
    summary = run_import(settings, catalog, load_plan(_plan(tmp_path, CASES[0])), catalog=f"cat-{tmp_path.name}")
    with db.transaction() as session:
        (task,) = queries.list_tasks(session, summary.import_id)
    queue = f"test-{uuid.uuid4().hex[:12]}"
    async with serving(client, settings, queue):
        await start_workflows(client, [task], summary.import_id, queue)
        assert await wait_for_status(settings, task.id, {"INVALID"}) == "INVALID"
    with db.transaction() as session:
        detail = queries.task_detail(session, task.id)
    assert "REELQUEUE_RUNWAY_API_KEY" in detail["task"]["last_error"] and detail["attempts"] == []
