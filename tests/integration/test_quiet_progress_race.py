"""A gateway-recorded RUNNING racing a status call (issue 45's drill), on real Postgres with two
sessions: the gateway's transaction (store the webhook, record RUNNING on the row) and poll_job's
(the move the workflow offered for what the status call saw) land in either order, or at once, and
the row ends where the later news says, moved once per status and never back."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from sqlalchemy import select, update
from stack_helpers import import_small

from activities.submit import request_key
from activities.tasks import apply_moves
from contracts.messages import TransitionInput
from contracts.provider import JobStatus, WebhookEvent
from contracts.task import TaskEvent
from schema import queries
from schema import webhook_inbox as inbox
from schema.db import Database
from schema.models import Attempt, StateEvent, Task
from schema.quiet_progress import Quiet, mark_quiet_progress, record_running
from schema.task_store import transition

pytestmark = pytest.mark.integration
E = TaskEvent
PROVIDER = "emulator"
LOCK_WAIT_S = 0.5  # long enough for the other session to reach the row lock and wait there


@dataclass(frozen=True)
class Submitted:
    task_id: str
    tenant_id: str
    job_id: str
    db: Database


@pytest.fixture
def task(stack, tmp_path) -> Submitted:
    """A task of a run that opted in, SUBMITTED (version 5) with attempt 1's job recorded."""
    summary = import_small(stack, tmp_path, [("QR-1", "Race", "A race")], duration_s=1)
    db = Database(stack.database_url)
    job_id = f"job_race_{uuid.uuid4().hex}"
    with db.transaction() as session:
        (row,) = queries.list_tasks(session, summary.import_id)
        session.add(Attempt(task_id=row.id, attempt_no=1, provider=PROVIDER, model=row.model,
                            request_key=request_key(row.id, 1), provider_job_id=job_id, submit_state="ACKED",
                            request_fingerprint="race"))
        for n, event in enumerate([E.VALIDATION_STARTED, E.VALIDATION_PASSED, E.QUEUED, E.DISPATCH_CLAIMED,
                                   E.PROVIDER_ACCEPTED]):
            assert transition(session, row.id, event, source="test", source_event_id=f"{row.id}:{n}").applied
        session.execute(update(Task).where(Task.id == row.id).values(current_attempt_no=1))
        mark_quiet_progress(session, row.tenant_id, row.id)
    return Submitted(row.id, row.tenant_id, job_id, db)


def webhook(task: Submitted, session) -> Quiet:  # noqa: ANN001
    """The gateway's transaction: the event stored, then the running recorded (gateway/webhooks.py)."""
    event = WebhookEvent(event_id=f"msg_{uuid.uuid4().hex}", job_id=task.job_id, status=JobStatus.RUNNING,
                         raw_status="running", observed_at=datetime.now(UTC), verified=True)
    receipt = inbox.record_event(session, PROVIDER, event, b"{}")
    return record_running(session, PROVIDER, receipt, inbox.to_update(event))


def status_call(task: Submitted, event: TaskEvent, session) -> bool:  # noqa: ANN001
    """poll_job's transaction: the move the workflow offered for the status it saw, as it believes
    the task SUBMITTED (its seventh move); whether it applied."""
    offer = TransitionInput(task_id=task.task_id, event=event, attempt_no=1,
                            source_event_id=f"{task.task_id}:7:{event.value}")
    ((_, out),) = apply_moves(session, [offer])
    return out.applied


def row(task: Submitted) -> tuple[str, int, list[tuple[str, str, str, bool]]]:
    with task.db.transaction() as session:
        found = session.scalar(select(Task).where(Task.tenant_id == task.tenant_id, Task.id == task.task_id))
        events = session.execute(
            select(StateEvent.source, StateEvent.event, StateEvent.to_status, StateEvent.applied)
            .where(StateEvent.task_id == task.task_id, StateEvent.source != "test").order_by(StateEvent.id)).all()
        return found.status, found.version, [tuple(e) for e in events]


def one(task: Submitted, step: Callable) -> object:
    with task.db.transaction() as session:
        return step(task, session)


def first_holds(task: Submitted, first: Callable, second: Callable) -> tuple[object, object]:
    """`first` writes and keeps its transaction open while `second` runs in another session (and
    must wait for the row), then commits: both outcomes."""
    with ThreadPoolExecutor(1) as pool:
        with task.db.transaction() as session:
            done_first = first(task, session)
            waiting: Future = pool.submit(one, task, second)
            time.sleep(LOCK_WAIT_S)
            assert not waiting.done(), "the second transaction did not wait for the first's row lock"
        return done_first, waiting.result(timeout=30)


def running_by_the_status_call(task: Submitted, session) -> bool:  # noqa: ANN001
    return status_call(task, E.PROVIDER_RUNNING, session)


def success_by_the_status_call(task: Submitted, session) -> bool:  # noqa: ANN001
    return status_call(task, E.PROVIDER_SUCCEEDED, session)


def both(task: Submitted, first: Callable, second: Callable, *, together: bool) -> tuple:
    """`first`'s transaction, then `second`'s: one after the other, or at once (`second` waits for the
    row `first` holds)."""
    return first_holds(task, first, second) if together else (one(task, first), one(task, second))


@pytest.mark.parametrize("together", [False, True], ids=["one-after-the-other", "at-once"])
def test_the_gateway_first_then_a_status_call_that_sees_running(task: Submitted, together: bool):
    quiet, applied = both(task, webhook, running_by_the_status_call, together=together)
    assert quiet is Quiet.RECORD
    status, version, events = row(task)
    assert (status, version) == ("RUNNING", 6)
    # Moved once; the workflow's own move finds the task there already and is taken as done
    # (activities/tasks.py, quiet_progress.running_already): no refusal recorded, nothing written.
    assert events == [("webhook", "provider_running", "RUNNING", True)] and applied is True


@pytest.mark.parametrize("together", [False, True], ids=["one-after-the-other", "at-once"])
def test_a_status_call_that_sees_running_first_then_the_gateway(task: Submitted, together: bool):
    applied, quiet = both(task, running_by_the_status_call, webhook, together=together)
    assert applied and quiet is Quiet.KEEP
    assert row(task) == ("RUNNING", 6, [("workflow", "provider_running", "RUNNING", True)])


@pytest.mark.parametrize("together", [False, True], ids=["one-after-the-other", "at-once"])
def test_a_success_seen_first_is_never_undone_by_a_late_running(task: Submitted, together: bool):
    applied, quiet = both(task, success_by_the_status_call, webhook, together=together)
    assert applied and quiet is Quiet.KEEP
    assert row(task) == ("OUTPUT_FETCHING", 6, [("workflow", "provider_succeeded", "OUTPUT_FETCHING", True)])


@pytest.mark.parametrize("together", [False, True], ids=["one-after-the-other", "at-once"])
def test_a_running_recorded_first_leaves_the_success_legal(task: Submitted, together: bool):
    quiet, applied = both(task, webhook, success_by_the_status_call, together=together)
    assert quiet is Quiet.RECORD and applied
    assert row(task) == ("OUTPUT_FETCHING", 7, [("webhook", "provider_running", "RUNNING", True),
                                                ("workflow", "provider_succeeded", "OUTPUT_FETCHING", True)])


def test_a_task_with_a_person_is_not_moved_by_the_gateway(task: Submitted):
    """NEEDS_ATTENTION has a row for provider_running (the operator's resume): the gateway never takes it."""
    with task.db.transaction() as session:
        assert transition(session, task.task_id, E.NEEDS_ATTENTION, source="test", source_event_id="na").applied
    assert one(task, webhook) is Quiet.KEEP
    assert row(task)[:2] == ("NEEDS_ATTENTION", 6)


def test_marking_is_scoped_to_the_tenant(task: Submitted, stack, tmp_path):
    summary = import_small(stack, tmp_path / "other", [("QR-2", "Other", "Not opted in")], duration_s=1)
    with task.db.transaction() as session:
        (other,) = queries.list_tasks(session, summary.import_id)
        mark_quiet_progress(session, "not-" + other.tenant_id, other.id)  # another tenant's id: nothing
        assert session.scalar(select(Task.quiet_progress).where(Task.id == other.id)) is False
        mark_quiet_progress(session, other.tenant_id, other.id)
        assert session.scalar(select(Task.quiet_progress).where(Task.id == other.id)) is True
