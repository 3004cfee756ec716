"""The prepare step (lean-path-v1): a task's validation, its credit hold and its moves to QUEUED in one
activity, where they were a validation activity, a reservation step and their moves.

The checks run first with no transaction open (the image fetch and the storage check are external
calls); then one transaction records VALIDATION_STARTED and, for a valid task, the hold of its estimate,
VALIDATION_PASSED (QUOTA_RESERVED) and QUEUED with its deadline. A tenant whose credit cannot hold the
estimate is an answer (`credit_short`), not a failure: the task is left VALIDATING, the hold not
written, and the workflow ends it. A task that already ended is found by the state machine (its moves
are refused). The run opts in to quiet progress there (schema/quiet_progress.py): the gateway records
its job's signed RUNNING on the task row instead of waking the workflow. Idempotent: the moves are once
per source id and the hold once per business key, so a repeated step writes nothing new and answers
the same deadline (the one on the task's row).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity

from activities.errors import classified
from activities.ledger import LedgerActivities
from activities.tasks import TaskActivities, apply_moves, moved
from contracts.messages import PrepareResult, TaskRef
from contracts.task import TaskStatus
from schema.models import Task
from schema.quiet_progress import mark_quiet_progress
from schema.task_store import TransitionOutcome


class PrepareActivities:
    def __init__(self, tasks: TaskActivities, ledger: LedgerActivities):
        self.tasks = tasks
        self.ledger = ledger

    @activity.defn(name="prepare_task")
    @classified
    def prepare_task(self, ref: TaskRef) -> PrepareResult:
        """`ref.moves`: VALIDATION_STARTED, VALIDATION_PASSED, QUEUED (its deadline is set here, from the
        step's scheduled time and the plan's task hours)."""
        checked = self.tasks.check(ref)
        started, passed, queued = ref.moves
        deadline_at = activity.info().scheduled_time + timedelta(seconds=checked.info.task_deadline_s)
        short, deadline = None, None
        with self.tasks.db.transaction() as session:
            done = apply_moves(session, [started])
            if checked.ok and _validating(done[0][1]):
                short = self.ledger.hold(session, ref)
                if short is None:
                    done += apply_moves(session, [passed, queued.model_copy(update={"deadline_at": deadline_at})])
                    task = session.get(Task, ref.task_id, populate_existing=True)
                    deadline = task.deadline_at
                    mark_quiet_progress(session, task.tenant_id, task.id)  # its signed RUNNING need not wake it
        return PrepareResult(**checked.model_dump(), credit_short=short, task_deadline_at=deadline,
                             moved=moved(done))


def _validating(started: TransitionOutcome) -> bool:
    """The task is being validated: just moved there, or there already (a task revalidated by `reelqueue
    retry --status INVALID`, whose own move refuses the run's validation_started)."""
    return started.applied or started.status == TaskStatus.VALIDATING.value
