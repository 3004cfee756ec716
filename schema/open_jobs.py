"""Whether a job of a task may still exist at a provider, read from its attempts and strays: the fact the
route rule rests on (a task changes route only when none may, docs/architecture.md "Routing")."""

from __future__ import annotations

from sqlalchemy import exists, or_, select
from sqlalchemy.orm import Session

from schema.models import Attempt
from schema.state_machine import AttemptState
from schema.strays import unaccounted

# An attempt in one of these may have a job at its provider: sent and not concluded, or accepted and not ended.
MAY_HAVE_A_JOB = tuple(s.value for s in (AttemptState.SENDING, AttemptState.UNKNOWN, AttemptState.ACKED,
                                         AttemptState.RUNNING))


def job_may_exist(session: Session, task_id: str) -> bool:
    """An attempt of the task whose job may exist, or a duplicate job of it not yet accounted."""
    return bool(session.scalar(select(or_(
        exists().where(Attempt.task_id == task_id, Attempt.submit_state.in_(MAY_HAVE_A_JOB)),
        exists().where(unaccounted(task_id))))))
