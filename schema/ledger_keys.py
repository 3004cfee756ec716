"""The business keys of a task's credit holds: every RESERVE a task writes is named here, from its run,
its purpose, and the attempt or route step it is for, so that no two holds of a run can share a key
(a shared key makes the second insert a silent no-op and the task under-reserved)."""

from __future__ import annotations

from enum import StrEnum

from contracts.messages import run_suffix

# The mark in the key of a ledger row that closes holds made after review closed the reservation
# (a regeneration's dearer route, a duplicate risk accepted after review): a closing round of its own.
LATER_CLOSE = ":review:"


class Hold(StrEnum):
    """Why a task holds credit."""

    TASK = "task"  # the task's reservation, for its video's estimate
    ROUTE = "route"  # the difference a dearer route costs, per route change of the run
    REGENERATION = "regeneration"  # one more job's estimate: the regeneration after failed checks
    RISK = "risk"  # one more job's estimate: the job an unknown submit may have made (accepted risk)


def hold_key(task_id: str, run: int, hold: Hold = Hold.TASK, *, attempt_no: int | None = None,
             step: int | None = None) -> str:
    """The RESERVE key of one hold. A route top-up is numbered by its step in the run (the first route
    change 1, the next 2, ...: two changes before one attempt do not collide); a further job's estimate
    names the attempt it is for, a risk apart from a regeneration."""
    base = f"reserve:{task_id}{run_suffix(run)}"
    if hold is Hold.TASK:
        return base
    if hold is Hold.ROUTE:
        if step is None or step < 1:
            raise ValueError("a route hold needs its step (1 for the run's first route change)")
        return f"{base}:route:s{step}"
    if attempt_no is None:
        raise ValueError(f"a {hold.value} hold names the attempt it is for")
    return f"{base}:risk:a{attempt_no}" if hold is Hold.RISK else f"{base}:a{attempt_no}"


def route_holds_prefix(task_id: str, run: int) -> str:
    """What every route top-up key of the run starts with (those written before the steps, `:route:a{n}`, too)."""
    return f"{hold_key(task_id, run)}:route:"


def held_attempt(key: str, task_id: str, run: int, hold: Hold) -> int | None:
    """The attempt a further hold's key names, or None when `key` is not such a hold. Before risks had
    their own keys an accepted risk was held under the regeneration's form, so RISK finds both."""
    base = hold_key(task_id, run)
    forms = [f"{base}:risk:a", f"{base}:a"] if hold is Hold.RISK else [f"{base}:a"]
    for form in forms:
        if key.startswith(form) and key[len(form):].isdigit():
            return int(key[len(form):])
    return None


def later_close_key(kind: str, task_id: str, run: int, attempt_no: int | None) -> str:
    """The key of a SETTLE/RELEASE/ADJUSTMENT that closes what a run held or cost after review closed its
    reservation, once per regenerated attempt."""
    return f"{kind.lower()}:{task_id}{run_suffix(run)}{LATER_CLOSE}{attempt_no}"
