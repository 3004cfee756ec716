"""Quiet progress: a signed "job running" webhook recorded on the task row by the gateway, not signaled.

A signal costs the workflow about four history events and a workflow task, and a signed RUNNING
only ever moves a task SUBMITTED -> RUNNING: the gateway makes that move itself, in the transaction
that stores the webhook, through the one table (`task_store.transition`: compare-and-set on the
version, its state event kept for the event feed). Only a run that opted in is left unsignaled
(`mark_quiet_progress`, called by the run's prepare step, lean-path-v1): a run from before waits for
the signal. Endings and unsigned hints always signal (the workflow confirms them with a status
call), and so does news the row cannot take yet or that is not about the task's current job.
Docs: docs/architecture.md, "Provider webhooks".
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

from sqlalchemy import and_, select, update
from sqlalchemy.orm import Session

from contracts.messages import ProviderUpdate
from contracts.provider import JobStatus
from contracts.task import TaskEvent, TaskStatus
from schema import state_machine as sm
from schema import task_store
from schema.models import Attempt, Task
from schema.webhook_inbox import Receipt

SOURCE = "webhook"  # state_events.source of a move the gateway recorded
S, E = TaskStatus, TaskEvent

# Where the table takes a job seen running, less the operator's resume out of NEEDS_ATTENTION (a
# person decides there): only forward, never out of an ended task.
QUIET_FROM: frozenset[TaskStatus] = frozenset(
    status for status, event in sm.TRANSITIONS if event is E.PROVIDER_RUNNING and status is not S.NEEDS_ATTENTION
)
# Where a job may be on its attempt's row before the task took its acceptance (a reconcile found it):
# the row cannot take RUNNING yet, so the workflow hears it, as before.
BEFORE: frozenset[TaskStatus] = frozenset(
    status for (status, _), to in sm.TRANSITIONS.items() if to in QUIET_FROM and status not in QUIET_FROM
)


class Quiet(StrEnum):
    SIGNAL = "signal"  # signal the workflow, as before
    RECORD = "record"  # move the task to RUNNING here; no signal
    KEEP = "keep"  # the task is at RUNNING or past it (or with a person, or ended): the inbox row is the record


def signed_running(update: ProviderUpdate) -> bool:
    """A signed report that the job runs, not an ending: news that only moves a task SUBMITTED ->
    RUNNING, which the row can take without the workflow. An ending brings outputs and a cost, and an
    unsigned report is a hint: the workflow confirms either with a status call, so both signal."""
    return update.verified and update.status is JobStatus.RUNNING


def decide(update: ProviderUpdate, *, status: TaskStatus, opted_in: bool, current_job: bool) -> Quiet:
    """What the gateway does with a webhook it would signal: record a signed running of the task's
    current job on a run that opted in, keep it when the task is further along, else signal."""
    if not (signed_running(update) and opted_in and current_job) or status in BEFORE:
        return Quiet.SIGNAL
    return Quiet.RECORD if status in QUIET_FROM else Quiet.KEEP


def running_already(session: Session, task_id: str) -> task_store.TransitionOutcome | None:
    """A PROVIDER_RUNNING the workflow offers for a task the gateway already moved to RUNNING (the run
    never heard of it): taken as done, nothing written, rather than refused (an audit event, a warning
    and an illegal-transition count for news the row already holds). None: the move goes on as usual."""
    # locked: a gateway's transaction under way on the row is waited for, and its RUNNING seen
    row = session.execute(select(Task.status, Task.version).where(Task.id == task_id).with_for_update()).first()
    if row is None or row.status != S.RUNNING.value:
        return None
    return task_store.TransitionOutcome(applied=True, duplicate=True, from_status=row.status, status=row.status,
                                        version=row.version)


def mark_quiet_progress(session: Session, tenant_id: str, task_id: str) -> None:
    """Opt the task's run in (its prepare step's transaction): from now on the gateway records its
    signed running webhooks instead of signaling the workflow. Written once; repeating it writes nothing."""
    session.execute(
        update(Task).where(Task.tenant_id == tenant_id, Task.id == task_id, Task.quiet_progress.is_(False))
        .values(quiet_progress=True),
        execution_options={"synchronize_session": False},
    )


class _Row(NamedTuple):
    status: str
    quiet_progress: bool
    attempt_no: int | None  # the current attempt's number when `update`'s job is that attempt's


def record_running(session: Session, provider: str, receipt: Receipt, update: ProviderUpdate) -> Quiet:
    """In the transaction that stored the webhook (`receipt`): decide, and make the move for RECORD.
    The task row is locked first, so a concurrent move (a status call's) waits and the move is decided
    on the status it is made from; only a webhook the gateway would signal is considered."""
    if receipt.workflow_id is None or receipt.task_id is None or not signed_running(update):
        return Quiet.SIGNAL
    row = _locked(session, provider, receipt.tenant_id, receipt.task_id, update.job_id)
    if row is None:
        return Quiet.SIGNAL
    quiet = decide(update, status=TaskStatus(row.status), opted_in=row.quiet_progress,
                   current_job=row.attempt_no is not None)
    if quiet is Quiet.RECORD:
        task_store.transition(session, receipt.task_id, E.PROVIDER_RUNNING, source=SOURCE,
                              source_event_id=f"provider_events:{receipt.row_id}", attempt_no=row.attempt_no,
                              payload={"job_id": update.job_id, "webhook": update.event_id, "provider": provider})
    return quiet


def _locked(session: Session, provider: str, tenant_id: str, task_id: str, job_id: str) -> _Row | None:
    """The task's status and opt-in, row locked, and whether `job_id` is its current attempt's job."""
    current = and_(Attempt.task_id == Task.id, Attempt.attempt_no == Task.current_attempt_no,
                   Attempt.provider == provider, Attempt.provider_job_id == job_id)
    found = session.execute(
        select(Task.status, Task.quiet_progress, Attempt.attempt_no).outerjoin(Attempt, current)
        .where(Task.tenant_id == tenant_id, Task.id == task_id).with_for_update(of=Task)
    ).first()
    return _Row(*found) if found is not None else None
