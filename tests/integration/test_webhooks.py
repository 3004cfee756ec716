"""Provider webhooks through the real gateway process: signed requests over HTTP, the inbox in
Postgres, signals in Temporal, and the emulator's webhook faults in real runs.

A "parked" workflow (started on a task queue no worker polls) receives signals without running,
so its history shows exactly what the gateway sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from cli_helpers import run_cli_async
from sqlalchemy import select, update
from stack_helpers import claim_dispatch, import_small, run_all
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError
from temporalio.testing import ActivityEnvironment

from activities.submit import SubmitActivities, request_key
from adapters.providers import build_providers
from adapters.providers.base import GenerationRequest
from adapters.providers.emulator_api import JobOut
from adapters.storage import ObjectStorage
from config.settings import Settings
from contracts.messages import AttemptRef, GenerationInput, ProviderUpdate, SubmitActivityResult
from contracts.task import TaskEvent
from contracts.workflow_api import SIGNAL_PROVIDER_UPDATE, WORKFLOW_NAME
from emulator.config import new_webhook_secret
from emulator.signing import webhook_headers
from schema import event_feed, queries
from schema.db import Database
from schema.models import Attempt, ProviderEvent, StateEvent, Task
from schema.quiet_progress import mark_quiet_progress
from schema.task_store import transition

pytestmark = [pytest.mark.integration, pytest.mark.long]


def job_json(job_id: str, key: str, status: str = "running") -> bytes:
    now = datetime.now(UTC)
    return JobOut(id=job_id, request_key=key, model="m", aspect_ratio="9:16", duration_s=1.0, status=status,
                  progress=0.5, created_at=now, updated_at=now).model_dump_json().encode()


async def deliver(stack: Settings, body: bytes, msg_id: str, *, secret: str | None = None,
                  age_s: int = 0) -> httpx.Response:
    """POST one delivery to the gateway, signed as the emulator signs (or with another secret)."""
    headers = webhook_headers(secret or stack.emulator_webhook_secret, msg_id, body, ts=int(time.time()) - age_s)
    async with httpx.AsyncClient(timeout=30) as http:
        return await http.post(stack.webhook_url("emulator"), content=body,
                               headers={"content-type": "application/json", **headers})


def event_rows(stack: Settings, **where: str) -> list[ProviderEvent]:
    with Database(stack.database_url).transaction() as session:
        query = select(ProviderEvent).order_by(ProviderEvent.id)
        for column, value in where.items():
            query = query.where(getattr(ProviderEvent, column) == value)
        return list(session.scalars(query))


async def signaled_event_ids(client: Client, workflow_id: str) -> list[str]:
    """The event id of every provider_update signal in the workflow's history, in order."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    found = []
    for e in history.events:
        attrs = e.workflow_execution_signaled_event_attributes
        if e.HasField("workflow_execution_signaled_event_attributes") and attrs.signal_name == SIGNAL_PROVIDER_UPDATE:
            (sent,) = await client.data_converter.decode(attrs.input.payloads, [ProviderUpdate])
            found.append(sent.event_id)
    return found


async def submit_results(client: Client, workflow_id: str) -> list[SubmitActivityResult]:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    submits = {e.event_id for e in history.events if e.HasField("activity_task_scheduled_event_attributes")
               and e.activity_task_scheduled_event_attributes.activity_type.name == "submit"}
    results = []
    for e in history.events:
        done = e.activity_task_completed_event_attributes
        if e.HasField("activity_task_completed_event_attributes") and done.scheduled_event_id in submits:
            (result,) = await client.data_converter.decode(done.result.payloads, [SubmitActivityResult])
            results.append(result)
    return results


def set_faults(stack: Settings, **faults: object) -> None:
    httpx.post(f"{stack.emulator_url}/_sim/faults", json=faults, timeout=10).raise_for_status()


def emulator_stats(stack: Settings) -> dict[str, int]:
    return httpx.get(f"{stack.emulator_url}/_sim/stats", timeout=10).json()


async def wait_until(check, what: str, timeout_s: float = 30.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)


@dataclass
class Parked:
    task: Task
    job_id: str
    key: str
    handle: WorkflowHandle


@pytest.fixture
async def parked(stack: Settings, client: Client, tmp_path) -> AsyncIterator[Parked]:
    """A task whose attempt 1 recorded a provider job, and its workflow started where no worker runs it."""
    summary = import_small(stack, tmp_path, [("H-1", "Hook", "A hook")], duration_s=1)
    db = Database(stack.database_url)
    with db.transaction() as session:
        (task,) = queries.list_tasks(session, summary.import_id)
        job_id, key = f"job_parked_{uuid.uuid4().hex}", request_key(task.id, 1)
        session.add(Attempt(task_id=task.id, attempt_no=1, provider="emulator", model=task.model, request_key=key,
                            provider_job_id=job_id, submit_state="ACKED", request_fingerprint="parked"))
    handle = await client.start_workflow(WORKFLOW_NAME, GenerationInput(task_id=task.id), id=task.workflow_id,
                                         task_queue=f"parked-{uuid.uuid4().hex[:8]}")
    try:
        yield Parked(task, job_id, key, handle)
    finally:
        with contextlib.suppress(RPCError):  # a test may have closed it already
            await handle.terminate("test over")


def task_state(stack: Settings, task_id: str) -> tuple[str, int]:
    with Database(stack.database_url).transaction() as session:
        task = session.get(Task, task_id)
        return task.status, task.version


async def test_forged_and_stale_deliveries_are_refused_and_change_nothing(stack, client, parked: Parked):
    before = task_state(stack, parked.task.id)
    body = job_json(parked.job_id, parked.key, "failed")
    forged = await deliver(stack, body, "msg_forged_" + uuid.uuid4().hex, secret=new_webhook_secret())
    stale = await deliver(stack, body, "msg_stale_" + uuid.uuid4().hex, age_s=600)
    ahead = await deliver(stack, body, "msg_ahead_" + uuid.uuid4().hex, age_s=-600)
    for resp in (forged, stale, ahead):
        assert resp.status_code == 401 and resp.headers["content-type"] == "application/problem+json"
        assert stack.emulator_webhook_secret.removeprefix("whsec_") not in resp.text
    assert event_rows(stack, provider_job_id=parked.job_id) == []
    assert task_state(stack, parked.task.id) == before
    assert await signaled_event_ids(client, parked.task.workflow_id) == []


async def test_the_same_event_twice_is_one_row_and_one_signal(stack, client, parked: Parked):
    msg = "msg_twice_" + uuid.uuid4().hex
    body = job_json(parked.job_id, parked.key, "running")
    first, second = await deliver(stack, body, msg), await deliver(stack, body, msg)
    assert (first.status_code, second.status_code) == (200, 200)
    (row,) = event_rows(stack, event_id=msg)
    assert (row.state, row.matched_by, row.task_id, row.verified) == ("matched", "job_id", parked.task.id, True)
    assert row.signaled_at is not None and row.raw_body == body.decode()
    assert set(row.headers) == {"webhook-id", "webhook-timestamp"}
    assert ProviderUpdate.model_validate(row.payload).status == "running"
    assert await signaled_event_ids(client, parked.task.workflow_id) == [msg]

    # A delivery whose signal never went out (Temporal was away) sends it when delivered again; the
    # signal's request id is the event's, so Temporal records it once even if the first had arrived.
    with Database(stack.database_url).transaction() as session:
        session.execute(update(ProviderEvent).where(ProviderEvent.id == row.id).values(signaled_at=None))
    assert (await deliver(stack, body, msg)).status_code == 200
    assert event_rows(stack, event_id=msg)[0].signaled_at is not None
    assert await signaled_event_ids(client, parked.task.workflow_id) == [msg]

    # A signed "still queued" moves nothing: stored and matched, not signaled.
    waiting = "msg_waiting_" + uuid.uuid4().hex
    assert (await deliver(stack, job_json(parked.job_id, parked.key, "queued"), waiting)).status_code == 200
    (row,) = event_rows(stack, event_id=waiting)
    assert (row.state, row.task_id, row.signaled_at) == ("matched", parked.task.id, None)
    assert await signaled_event_ids(client, parked.task.workflow_id) == [msg]

    # Another event of the same job, and one of another job of the same request key: both signaled.
    other = "msg_other_" + uuid.uuid4().hex
    stray = "msg_stray_" + uuid.uuid4().hex
    assert (await deliver(stack, job_json(parked.job_id, parked.key, "succeeded"), other)).status_code == 200
    assert (await deliver(stack, job_json("job_stray_" + uuid.uuid4().hex, parked.key), stray)).status_code == 200
    assert event_rows(stack, event_id=stray)[0].matched_by == "request_key"
    assert await signaled_event_ids(client, parked.task.workflow_id) == [msg, other, stray]


async def test_a_chatty_provider_gets_one_signal_per_status(stack, client, parked: Parked):
    """Progress events that repeat a status the workflow already has are stored, not signaled, so
    a provider that reports every second cannot flood the workflow's history."""
    ids = [f"msg_chatty_{i}_" + uuid.uuid4().hex for i in range(5)]
    for msg in ids:
        assert (await deliver(stack, job_json(parked.job_id, parked.key, "running"), msg)).status_code == 200
    ended = "msg_chatty_end_" + uuid.uuid4().hex
    assert (await deliver(stack, job_json(parked.job_id, parked.key, "succeeded"), ended)).status_code == 200
    assert {r.event_id for r in event_rows(stack, provider_job_id=parked.job_id)} == {*ids, ended}
    assert await signaled_event_ids(client, parked.task.workflow_id) == [ids[0], ended]
    # A stored repeat delivered again is still no news: the workflow has its status.
    assert (await deliver(stack, job_json(parked.job_id, parked.key, "running"), ids[1])).status_code == 200
    assert await signaled_event_ids(client, parked.task.workflow_id) == [ids[0], ended]


def submitted(stack: Settings, task: Task, *, quiet: bool) -> None:
    """The parked task where its workflow has it once the provider accepted attempt 1 (SUBMITTED),
    opted in to quiet progress as a run's prepare step does, or not (a run from before)."""
    with Database(stack.database_url).transaction() as session:
        for n, event in enumerate([TaskEvent.VALIDATION_STARTED, TaskEvent.VALIDATION_PASSED, TaskEvent.QUEUED,
                                   TaskEvent.DISPATCH_CLAIMED, TaskEvent.PROVIDER_ACCEPTED]):
            assert transition(session, task.id, event, source="test", source_event_id=f"{task.id}:{n}").applied
        session.execute(update(Task).where(Task.id == task.id).values(current_attempt_no=1))
        if quiet:
            mark_quiet_progress(session, task.tenant_id, task.id)


def webhook_moves(stack: Settings, task: Task) -> list[tuple[str, str, bool]]:
    """The task's state events written by the gateway, and the tenant's event feed's view of them."""
    with Database(stack.database_url).transaction() as session:
        rows = session.execute(select(StateEvent.event, StateEvent.to_status, StateEvent.applied)
                               .where(StateEvent.task_id == task.id, StateEvent.source == "webhook")).all()
        feed, _ = event_feed.read(session, task.tenant_id, event_feed.Cursor(seen=event_feed.EMPTY), task_id=task.id)
    assert [(e.event, e.to_status) for e in feed if e.version > 5] == [(r[0], r[1]) for r in rows if r[2]]
    return [tuple(r) for r in rows]


async def test_a_signed_running_of_a_run_that_opted_in_is_recorded_not_signaled(stack, client, parked: Parked):
    """Issue 45, item 3: the gateway moves the row SUBMITTED -> RUNNING (its state event in the feed)
    in the transaction that stores the event, and the workflow gets no signal; a final still signals."""
    submitted(stack, parked.task, quiet=True)
    msg = "msg_quiet_" + uuid.uuid4().hex
    body = job_json(parked.job_id, parked.key, "running")
    assert (await deliver(stack, body, msg)).status_code == 200
    assert task_state(stack, parked.task.id) == ("RUNNING", 6)
    assert webhook_moves(stack, parked.task) == [("provider_running", "RUNNING", True)]
    (row,) = event_rows(stack, event_id=msg)
    assert (row.state, row.task_id, row.signaled_at) == ("matched", parked.task.id, None)
    assert await signaled_event_ids(client, parked.task.workflow_id) == []

    # Delivered again, and another running of the job: no signal, no second move.
    again = "msg_quiet_again_" + uuid.uuid4().hex
    assert (await deliver(stack, body, msg)).status_code == 200
    assert (await deliver(stack, body, again)).status_code == 200
    assert task_state(stack, parked.task.id) == ("RUNNING", 6)
    assert webhook_moves(stack, parked.task) == [("provider_running", "RUNNING", True)]

    # A duplicate job of the same request is not the task's job: the workflow decides, as before.
    stray = "msg_quiet_stray_" + uuid.uuid4().hex
    assert (await deliver(stack, job_json("job_stray_" + uuid.uuid4().hex, parked.key), stray)).status_code == 200
    ended = "msg_quiet_end_" + uuid.uuid4().hex
    assert (await deliver(stack, job_json(parked.job_id, parked.key, "succeeded"), ended)).status_code == 200
    assert await signaled_event_ids(client, parked.task.workflow_id) == [stray, ended]
    assert task_state(stack, parked.task.id) == ("RUNNING", 6)  # the final waits for the workflow's status call


async def test_a_signed_running_of_a_run_from_before_is_signaled_as_today(stack, client, parked: Parked):
    submitted(stack, parked.task, quiet=False)
    msg = "msg_loud_" + uuid.uuid4().hex
    assert (await deliver(stack, job_json(parked.job_id, parked.key, "running"), msg)).status_code == 200
    assert await signaled_event_ids(client, parked.task.workflow_id) == [msg]
    assert event_rows(stack, event_id=msg)[0].signaled_at is not None
    assert task_state(stack, parked.task.id) == ("SUBMITTED", 5)  # the workflow moves it (parked here)
    assert webhook_moves(stack, parked.task) == []


async def test_an_event_for_a_closed_workflow_is_stored_and_answered(stack, client, parked: Parked):
    await parked.handle.terminate("closed before the event")
    msg = "msg_closed_" + uuid.uuid4().hex
    assert (await deliver(stack, job_json(parked.job_id, parked.key), msg)).status_code == 200
    (row,) = event_rows(stack, event_id=msg)
    assert row.state == "matched" and row.signaled_at is None  # a no-op, not an error


async def test_unknown_jobs_are_orphans_counted_by_status_and_expire(stack):
    before = (await run_cli_async("status", "--json")).json["webhooks"]
    msg = "msg_orphan_" + uuid.uuid4().hex
    job = "job_nobody_" + uuid.uuid4().hex
    assert (await deliver(stack, job_json(job, "nobody-a1"), msg)).status_code == 200
    (row,) = event_rows(stack, event_id=msg)
    assert (row.state, row.task_id, row.matched_by) == ("orphan", None, None)
    counted = (await run_cli_async("status", "--json")).json["webhooks"]
    assert counted == {"orphans": before["orphans"] + 1, "expired": before["expired"]}
    with Database(stack.database_url).transaction() as session:  # past the 1 h TTL
        session.execute(update(ProviderEvent).where(ProviderEvent.id == row.id).values(
            received_at=datetime.now(UTC) - timedelta(hours=2)))
    aged = await run_cli_async("status")
    assert aged.code == 0 and f"{before['orphans']} orphans, {before['expired'] + 1} expired" in aged.stdout


async def test_a_webhook_before_the_submit_answer_is_claimed_by_the_submit(stack, tmp_path):
    summary = import_small(stack, tmp_path, [("E-1", "Early", "An early bird")], duration_s=1)
    db = Database(stack.database_url)
    with db.transaction() as session:
        (task,) = queries.list_tasks(session, summary.import_id)
    key = request_key(task.id, 1)
    # An event naming our request key before any job is recorded: an orphan.
    early_key = "msg_key_" + uuid.uuid4().hex
    assert (await deliver(stack, job_json("job_elsewhere_" + uuid.uuid4().hex, key), early_key)).status_code == 200
    assert event_rows(stack, event_id=early_key)[0].state == "orphan"

    claim_dispatch(stack.database_url, task.id)
    submit = SubmitActivities(db, ObjectStorage.from_settings(stack), build_providers(stack), "test-worker",
                              webhook_url=stack.webhook_url)
    ref = AttemptRef(task_id=task.id, attempt_no=1)
    set_faults(stack, webhook_before_response=1)
    try:
        result = await asyncio.to_thread(ActivityEnvironment().run, submit.submit, ref)
    finally:
        httpx.delete(f"{stack.emulator_url}/_sim/faults", timeout=10)
    assert result.outcome == "accepted" and result.webhooks
    # The queued event, sent before the 201 (and maybe the next, if the job started meanwhile),
    # stored as orphans and claimed in transaction B.
    early = result.early_updates[0]
    assert (early.job_id, early.status, early.verified) == (result.job_id, "queued", True)
    assert all(u.job_id == result.job_id for u in result.early_updates)
    (row,) = event_rows(stack, event_id=early.event_id)
    assert (row.state, row.matched_by, row.task_id) == ("matched", "submit", task.id)
    assert event_rows(stack, event_id=early_key)[0].task_id == task.id  # claimed by request key, not returned
    with db.transaction() as session:
        attempt = session.scalar(select(Attempt).where(Attempt.task_id == task.id))
    assert attempt.provider_job_id == result.job_id

    again = await asyncio.to_thread(ActivityEnvironment().run, submit.submit, ref)  # a retried activity
    assert again.early_updates == result.early_updates and again.webhooks

    # Later events of the job match it by job id on arrival.
    await wait_until(lambda: any(r.matched_by == "job_id" for r in event_rows(stack, provider_job_id=result.job_id)),
                     "an event matched by job id")


async def test_webhooks_of_an_unknown_submit_are_handed_over_by_reconcile(stack, tmp_path):
    """The submit's answer was lost, so the job's webhooks came for a job nobody knew (orphans);
    the reconcile that finds the job claims them and hands them to the workflow."""
    summary = import_small(stack, tmp_path, [("U-1", "Unknown", "A lost answer")], duration_s=1)
    db = Database(stack.database_url)
    with db.transaction() as session:
        (task,) = queries.list_tasks(session, summary.import_id)
    provider = build_providers(stack)[task.provider]
    key = request_key(task.id, 1)
    request = GenerationRequest(request_key=key, model=task.model, prompt="p", aspect_ratio="9:16",
                                duration_s=1.0, webhook_url=stack.webhook_url(task.provider))
    job_id = provider.submit(request).job_id  # as if its answer never reached us
    now = datetime.now(UTC)
    with db.transaction() as session:
        session.add(Attempt(task_id=task.id, attempt_no=1, provider=provider.name, model=task.model,
                            request_key=key, submit_state="UNKNOWN", request_fingerprint="x", sent_at=now,
                            call_ended_at=now, updated_at=now))
    await wait_until(lambda: event_rows(stack, provider_job_id=job_id), "a webhook of the unknown job")
    assert {r.state for r in event_rows(stack, provider_job_id=job_id)} == {"orphan"}

    submit = SubmitActivities(db, ObjectStorage.from_settings(stack), build_providers(stack), "test-worker")
    ref = AttemptRef(task_id=task.id, attempt_no=1)
    found = await asyncio.to_thread(ActivityEnvironment().run, submit.reconcile_submit, ref)
    assert (found.outcome, found.job_id) == ("found", job_id)
    rows = event_rows(stack, provider_job_id=job_id, matched_by="reconcile")
    assert rows and {u.event_id for u in found.early_updates} == {r.event_id for r in rows}
    assert all(r.task_id == task.id and r.state == "matched" for r in rows)
    again = await asyncio.to_thread(ActivityEnvironment().run, submit.reconcile_submit, ref)  # a retried activity
    assert again.early_updates == found.early_updates
    provider.cancel(job_id)


async def test_a_run_with_early_duplicated_and_reordered_webhooks_succeeds(stack, client, task_queue, tmp_path):
    summary = import_small(stack, tmp_path, [("R-1", "Reel", "A reel")], duration_s=1)
    before = emulator_stats(stack)
    set_faults(stack, webhook_before_response=1, duplicate_webhook=2, reorder_webhooks=1)
    try:
        (task,) = await run_all(client, stack, summary.import_id, task_queue)
    finally:
        httpx.delete(f"{stack.emulator_url}/_sim/faults", timeout=10)
    assert task.status == "SUCCEEDED"
    after = emulator_stats(stack)
    assert after["webhooks_before_response"] - before["webhooks_before_response"] == 1
    assert after["webhooks_duplicated"] > before["webhooks_duplicated"]
    assert after["webhooks_reordered"] > before["webhooks_reordered"]

    (result,) = await submit_results(client, task.workflow_id)
    assert result.webhooks and result.early_updates[0].status == "queued"
    await asyncio.sleep(0.5)  # a signal sent just before the workflow closed is marked right after
    rows = event_rows(stack, task_id=task.id)
    assert {r.event_id for r in rows if r.matched_by == "submit"} == {u.event_id for u in result.early_updates}
    assert all(r.state == "matched" and r.provider_job_id == result.job_id for r in rows)
    assert event_rows(stack, request_key=request_key(task.id, 1), state="orphan") == []
    signaled = await signaled_event_ids(client, task.workflow_id)
    assert len(signaled) == len(set(signaled))  # duplicates never reach the workflow twice
    assert set(signaled) == {r.event_id for r in rows if r.signaled_at is not None}
    moves = _moves(stack, task.id)  # each status entered once and in order (RUNNING may be skipped
    assert moves == [m for m in MAIN_LINE if m in moves] and moves[-1] == "SUCCEEDED"  # when reordered)


MAIN_LINE = ["VALIDATING", "QUOTA_RESERVED", "QUEUED", "DISPATCHING", "SUBMITTED", "RUNNING",
             "OUTPUT_FETCHING", "POST_PROCESSING", "SUCCEEDED"]


def _moves(stack: Settings, task_id: str) -> list[str]:
    with Database(stack.database_url).transaction() as session:
        return [e["to"] for e in queries.task_detail(session, task_id)["events"] if e["applied"]]


async def test_with_every_webhook_lost_the_task_ends_by_polling(stack, client, task_queue, tmp_path):
    summary = import_small(stack, tmp_path, [("Q-1", "Quiet", "A quiet one")], duration_s=1)
    before = emulator_stats(stack)
    set_faults(stack, drop_all_webhooks=True)
    try:
        (task,) = await run_all(client, stack, summary.import_id, task_queue, timeout=180)
    finally:
        httpx.delete(f"{stack.emulator_url}/_sim/faults", timeout=10)
    assert task.status == "SUCCEEDED"
    # Every event of this job was dropped and none arrived (the emulator's global counters may still
    # move with a webhook of an earlier test's job, so arrival is judged by this task's inbox rows).
    assert emulator_stats(stack)["webhooks_dropped_injected"] > before["webhooks_dropped_injected"]
    assert event_rows(stack, task_id=task.id) == []
    (result,) = await submit_results(client, task.workflow_id)
    assert result.webhooks  # it asked for them, so it polled only as a safety net, and that sufficed
    with Database(stack.database_url).transaction() as session:
        polls = session.scalars(select(Attempt.poll_count).where(Attempt.task_id == task.id)).all()
    assert polls and polls[0] >= 1, polls
    assert _moves(stack, task.id)[-1] == "SUCCEEDED"


async def test_dev_status_shows_the_webhook_url(stack):
    shown = (await run_cli_async("dev", "status", "--json")).json
    assert shown["webhook_url"] == stack.webhook_url("emulator") == f"{stack.gateway_url}/webhooks/emulator"
    assert shown["services"]["gateway"]["up"] is True
