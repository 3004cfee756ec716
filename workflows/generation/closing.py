"""Closing: the one way a task ends (`_end`), the clean-up after a takeover, and the ledger's
settlement of what providers charged."""

from __future__ import annotations

import asyncio
from typing import Any, NoReturn

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.errors import INSUFFICIENT_CREDIT
    from activities.ledger import LedgerActivities
    from activities.poll import PollActivities
    from contracts.messages import LedgerResult, SettleInput, TaskRef
    from contracts.task import TaskEvent

from workflows.generation.patches import STRAYS, TAKEOVER_FOLLOWS
from workflows.generation.state import RunState, TaskEnded
from workflows.generation.steps import error_type


class Closing(RunState):
    """How a task ends: `_end` (stop a live job, give the slot back, settle, record the final move), the
    clean-up after a takeover, and the ledger's settlement."""

    async def _end(self, event: TaskEvent, *, error: str | None = None, error_class: str | None = None,
                   payload: dict | None = None, cancel_outcome: str | None = None,
                   closed: LedgerResult | None = None) -> NoReturn:
        """The one way a task ends: stop any live job, close the ledger, record the final move. `closed`:
        the media step already settled and committed the move it was offered (lean-path-v1)."""
        if self._live is not None:
            await self._stop_live(self._live)
        await self._release_slot()
        ending = {"error": error, "error_class": error_class, "payload": payload, "cancel_outcome": cancel_outcome}
        if closed is not None:
            await self._take(self._offer(event, **ending), closed.moved)
        else:
            event = await self._close_ledger(event, ending if self._carry else None)
        self._error = error
        if not self._carry:
            await self._move(event, **ending)
        self._tell("ended", f"ended {self._status.value}" + (f": {error}" if error else ""))
        raise TaskEnded(error)

    async def _clean_up_after_takeover(self) -> None:
        """Someone else ended the task (e.g. `reelqueue cancel` before this run started): start
        nothing new, stop the job this run started, and close the ledger."""
        self._error = f"task ended outside this workflow ({self._status.value})"
        if self._live is not None and self._patched(TAKEOVER_FOLLOWS):
            await self._stop_live(self._live, person=False)  # its cost known before the ledger closes
        elif self._live is not None:
            state = await self._run(PollActivities.cancel_job, self._live)
            await self._observe(self._live, state)
        await self._release_slot()
        await self._close_ledger(TaskEvent.CANCEL_CONFIRMED)

    async def _close_ledger(self, event: TaskEvent, ending: dict[str, Any] | None = None) -> TaskEvent:
        """Settle what providers charged (possibly nothing) and release the rest of the hold;
        duplicate jobs are accounted first, as ADJUSTMENTs of their own. Returns the event that
        ends the task (a person's decision on strays may change it); with `ending` (the final move's
        fields, transition-in-work-v2) that move is committed with the ledger's rows."""
        if self._patched(STRAYS):
            event = await self._settle_strays(event)
        elif self._strays:
            await asyncio.gather(*self._strays)
            self._strays = []
        booked = self._booked  # review closed the reservation: later attempts are charged on their own
        final = [self._offer(event, **ending)] if ending is not None else []
        settled = await self._run(LedgerActivities.settle, SettleInput(
            task_id=self._task_id, run=self._run_no, attempt_no=self._attempt_no or None,
            cost=self._cost() if booked is None else round(self._cost() - booked, 6),
            reason=event.value, after_review=booked is not None, moves=final))
        if booked is not None:
            self._booked = self._cost()
        if final:
            await self._take(final[0], settled.moved)
        return event

    async def _hold_for(self, attempt_no: int, hold: str = "regeneration") -> bool:
        """Hold one more job's estimate beside the task's reservation, naming `attempt_no` and why (`hold`: a
        regeneration after failed checks, or an accepted duplicate risk); settle closes it with the rest.
        False: no credit."""
        try:
            await self._run(LedgerActivities.reserve_credit,
                            TaskRef(task_id=self._task_id, run=self._run_no, hold_for_attempt=attempt_no, hold=hold))
        except ActivityError as exc:
            if error_type(exc) != INSUFFICIENT_CREDIT:
                raise
            return False
        return True
