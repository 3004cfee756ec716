"""Applying state-machine transitions to task rows: CAS on version, one state event each.

Every writer of a task status (workflow, CLI, webhook gateway) comes through `transition`. It is
idempotent per (source, source_event_id): replaying the same event returns what was recorded the
first time instead of moving the task again. The few rows that depend on the task's past
(`state_machine.GUARDED`) read it here, in the same transaction: the applied state events, and the
attempt rows (a submit still SENDING or UNKNOWN is unresolved whatever the events say).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel
from sqlalchemy import exists, insert, select, update
from sqlalchemy.orm import Session

from contracts.task import TaskEvent, TaskStatus
from schema import state_machine as sm
from schema.models import Attempt, StateEvent, Task

MAX_CAS_RETRIES = 5


class TransitionOutcome(BaseModel):
    applied: bool  # False: the table had no row for (status, event); only an audit event was kept
    duplicate: bool = False  # the same source event was recorded before
    from_status: str
    status: str
    version: int
    conflicts: int = 0  # compare-and-set losses to a concurrent writer before this outcome
    left_after_s: float | None = None  # applied: how long the task had been in `from_status`


class TaskNotFound(LookupError):
    pass


def transition(
    session: Session,
    task_id: str,
    event: TaskEvent,
    *,
    source: str,
    source_event_id: str,
    attempt_no: int | None = None,
    payload: dict[str, Any] | None = None,
    task_updates: dict[str, Any] | None = None,
) -> TransitionOutcome:
    """Move `task_id` by `event` if the table allows it; always leave a state event behind.

    The task and whether this source event was recorded before come back in one query (the common
    case, a new event, then costs that read, the compare-and-set update and the event's insert)."""
    task, seen_applied, seen_from = _load_with_seen(session, task_id, source, source_event_id)
    if seen_from is not None:
        return TransitionOutcome(
            applied=seen_applied, duplicate=True, from_status=seen_from, status=task.status, version=task.version,
        )
    for conflicts in range(MAX_CAS_RETRIES):
        if conflicts:
            task = _load(session, task_id)
        past = _past(session, task_id) if sm.needs_past(task.status, event) else None
        try:
            move = sm.apply(TaskStatus(task.status), task.version, event, past)
        except sm.IllegalTransition as refused:
            audit = {**(payload or {}), "refused": refused.reason} if refused.reason else payload
            _append_event(session, task, event, task.status, task.status, task.version, source, source_event_id,
                          attempt_no, audit, applied=False)
            return TransitionOutcome(applied=False, from_status=task.status, status=task.status,
                                     version=task.version, conflicts=conflicts)
        now = datetime.now(UTC)
        from_status, version, to = task.status, task.version, move.to_status
        entered = task.updated_at
        values: dict[str, Any] = {"status": to.value, "version": move.to_version, "updated_at": now}
        if to in sm.TERMINAL:
            values["finished_at"] = now
        if task.started_at is None and to is not TaskStatus.CREATED:
            values["started_at"] = now
        values.update(task_updates or {})
        result = session.execute(
            update(Task).where(Task.id == task_id, Task.version == version).values(**values),
            execution_options={"synchronize_session": False},
        )
        if result.rowcount == 1:
            _append_event(session, task, event, from_status, to.value, move.to_version, source, source_event_id,
                          attempt_no, payload, applied=True)
            return TransitionOutcome(applied=True, from_status=from_status, status=to.value, version=move.to_version,
                                     conflicts=conflicts,
                                     left_after_s=(now - entered).total_seconds() if entered else None)
        session.expire_all()  # someone else moved the task: re-read and decide again
    raise RuntimeError(f"task {task_id}: version kept changing, gave up after {MAX_CAS_RETRIES} tries")


def _load_with_seen(
    session: Session, task_id: str, source: str, source_event_id: str
) -> tuple[Task, bool, str | None]:
    """The task, and (applied, from_status) of the state event with this source id if one exists."""
    seen = (StateEvent.source == source, StateEvent.source_event_id == source_event_id)
    row = session.execute(
        select(Task, select(StateEvent.applied).where(*seen).scalar_subquery(),
               select(StateEvent.from_status).where(*seen).scalar_subquery())
        .where(Task.id == task_id).execution_options(populate_existing=True)
    ).first()
    if row is None:
        raise TaskNotFound(task_id)
    return row[0], bool(row[1]), row[2]


def _past(session: Session, task_id: str) -> sm.Past:
    """The task's past for a guarded row: its applied moves folded, and its attempt rows."""
    moves = session.execute(
        select(StateEvent.event, StateEvent.from_status, StateEvent.to_status)
        .where(StateEvent.task_id == task_id, StateEvent.applied).order_by(StateEvent.id)
    )
    past = sm.Past.replay(moves)
    unresolved = session.scalar(select(exists().where(
        Attempt.task_id == task_id, Attempt.submit_state.in_([s.value for s in sm.ATTEMPT_UNRESOLVED]))))
    return replace(past, unknown_submit=True) if unresolved else past


def _load(session: Session, task_id: str) -> Task:
    task = session.scalar(select(Task).where(Task.id == task_id).execution_options(populate_existing=True))
    if task is None:
        raise TaskNotFound(task_id)
    return task


def _append_event(
    session: Session,
    task: Task,
    event: TaskEvent,
    from_status: str,
    to_status: str,
    version: int,
    source: str,
    source_event_id: str,
    attempt_no: int | None,
    payload: dict[str, Any] | None,
    *,
    applied: bool,
) -> None:
    session.execute(
        insert(StateEvent).values(
            task_id=task.id, attempt_no=attempt_no, source=source, source_event_id=source_event_id,
            event=TaskEvent(event).value, from_status=from_status, to_status=to_status, task_version=version,
            applied=applied, payload=payload or {},
        )
    )
