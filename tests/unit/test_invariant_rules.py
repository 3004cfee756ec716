"""The invariant checker's pure rules (schema/invariants.py, control/invariants.py): each passes a
healthy case and counts a crafted bad one. The rules that read Postgres and S3 are exercised on a
real import in tests/integration/test_invariants.py."""

from __future__ import annotations

from decimal import Decimal

from contracts.task import TaskEvent, TaskStatus
from control.invariants import GateAnswer, jobs_by_task
from schema.invariants import (
    CREATED_AUDIT,
    Invariant,
    InvariantReport,
    JobsExpected,
    LedgerTotals,
    RuleResult,
    bad_move,
    ledger_results,
    provider_jobs_rule,
)
from schema.ledger_check import Rule, Violation

E, S = TaskEvent, TaskStatus

MAIN_LINE = [(E.VALIDATION_STARTED, S.VALIDATING), (E.VALIDATION_PASSED, S.QUOTA_RESERVED), (E.QUEUED, S.QUEUED),
             (E.DISPATCH_CLAIMED, S.DISPATCHING), (E.PROVIDER_ACCEPTED, S.SUBMITTED),
             (E.PROVIDER_RUNNING, S.RUNNING), (E.PROVIDER_SUCCEEDED, S.OUTPUT_FETCHING),
             (E.OUTPUT_PERSISTED, S.POST_PROCESSING), (E.PLAYABLE_ASSET_READY, S.SUCCEEDED)]


def moves(line=MAIN_LINE, start: S = S.CREATED) -> list[tuple[str, str, str, int]]:
    out, status = [], start
    for version, (event, to) in enumerate(line, 1):
        out.append((event.value, status.value, to.value, version))
        status = to
    return out


def test_the_main_line_and_the_created_audit_event_pass():
    assert bad_move(moves()) is None
    assert bad_move([CREATED_AUDIT, *moves()]) is None
    assert bad_move([]) is None


def test_a_move_the_table_does_not_have_is_reported():
    line = moves()
    line[6] = (E.PLAYABLE_ASSET_READY.value, S.RUNNING.value, S.SUCCEEDED.value, 7)  # RUNNING -> SUCCEEDED
    assert "no transition" in bad_move(line)


def test_a_move_whose_target_differs_from_the_table_is_reported():
    line = moves()
    line[-1] = (E.PLAYABLE_ASSET_READY.value, S.POST_PROCESSING.value, S.REVIEW.value, 9)
    assert "the table says SUCCEEDED" in bad_move(line)


def test_versions_must_strictly_increase():
    line = moves()
    line[4] = (*line[4][:3], 4)  # the same version as the move before
    assert "version 4 after version 4" in bad_move(line)


def test_an_event_must_start_where_the_last_one_ended():
    line = moves()
    del line[5]  # SUBMITTED -> RUNNING missing: RUNNING -> OUTPUT_FETCHING follows SUBMITTED
    line = [(e, f, t, v) for v, (e, f, t, _) in enumerate(line, 1)]
    assert "the task was SUBMITTED" in bad_move(line)


def test_the_past_is_asked_a_paid_video_never_goes_back_to_generating():
    """RUNNING -> RETRY_WAIT is a row of the table, but not once the video is paid for (a guarded row)."""
    line = moves(MAIN_LINE[:7])  # up to OUTPUT_FETCHING: paid
    line += [(E.CANCEL_REQUESTED.value, S.OUTPUT_FETCHING.value, S.CANCEL_REQUESTED.value, 8),
             (E.COMPLETION_WON.value, S.CANCEL_REQUESTED.value, S.OUTPUT_FETCHING.value, 9)]
    assert "paid for" in bad_move(line)


def test_an_unknown_event_or_status_is_reported():
    assert bad_move([("teleported", S.CREATED.value, S.SUCCEEDED.value, 1)]) is not None
    assert bad_move([(E.VALIDATION_STARTED.value, "LIMBO", S.VALIDATING.value, 1)]) is not None


def test_provider_jobs_equal_recorded_jobs_and_an_unknown_submit_may_have_one():
    expected = {"t1": JobsExpected(known=1), "t2": JobsExpected(known=2), "t3": JobsExpected(known=0, unknown=1)}
    ok = provider_jobs_rule(expected, {"t1": 1, "t2": 2, "t3": 1, "elsewhere": 5})
    assert ok.checked and ok.violations == 0 and "5 jobs" not in ok.detail
    assert provider_jobs_rule(expected, {"t1": 1, "t2": 2}).violations == 0  # t3's submit created nothing


def test_an_unrecorded_job_and_a_recorded_job_the_provider_lacks_are_counted():
    expected = {"t1": JobsExpected(known=1), "t2": JobsExpected(known=2)}
    bad = provider_jobs_rule(expected, {"t1": 2, "t2": 1})
    assert bad.violations == 2 and bad.task_ids == ["t1", "t2"]
    assert "1 not recorded, 1 recorded but absent" in bad.detail


def test_jobs_are_counted_by_the_task_in_their_request_key():
    assert jobs_by_task(["abc-a1", "abc-a2", "x-y-a1", "", "nokey"]) == {"abc": 2, "x-y": 1}


def _violation(task: str, rule: Rule) -> Violation:
    return Violation(task_id=task, status="SUCCEEDED", rule=rule, detail=f"{rule} of {task}")


def test_ledger_findings_become_one_result_per_rule():
    balanced = LedgerTotals(reserved=Decimal(6), settled=Decimal(4), released=Decimal(2))
    results = {r.rule: r for r in ledger_results([], balanced)}
    assert set(results) == {r.value for r in Rule if r is not Rule.UNBALANCED} | {Invariant.LEDGER_BALANCED.value}
    assert all(r.checked and r.violations == 0 for r in results.values())

    found = [_violation("t1", Rule.UNBALANCED), _violation("t1", Rule.REPEATED_ENTRY),
             _violation("t2", Rule.ATTEMPT_SENDING), _violation("t2", Rule.ATTEMPT_SENDING)]
    off = LedgerTotals(reserved=Decimal(6), settled=Decimal(4), released=Decimal(1))
    results = {r.rule: r for r in ledger_results(found, off)}
    assert results["ledger_balanced"].violations == 2  # the task run and the scope's totals
    assert "scope unbalanced" in results["ledger_balanced"].detail
    assert results["repeated_entry"].task_ids == ["t1"]
    assert results["attempt_sending"].violations == 2 and results["attempt_sending"].task_ids == ["t2"]
    assert results["open_attempt"].violations == 0


def test_a_rule_not_checked_never_passes_for_checked_and_ok_ignores_it():
    unchecked = RuleResult.not_checked(Invariant.PROVIDER_JOBS, "no counts")
    passed = RuleResult.found(Invariant.STATE_EVENTS, [], "fine")
    report = InvariantReport.of(None, 3, [unchecked, passed])
    assert report.ok and not report.rule("provider_jobs").checked and "not checked" in unchecked.detail
    broken = RuleResult.found(Invariant.STATE_EVENTS, ["t"] * 3 + [f"t{i}" for i in range(80)], "bad")
    assert broken.violations == 81 and len(broken.task_ids) == 50
    assert not InvariantReport.of(None, 3, [unchecked, broken]).ok


def test_a_gate_not_found_is_undecided_when_tasks_of_the_scope_took_its_slots() -> None:
    """NOT_FOUND is "no holders" only for a gate the scope never needed; otherwise the rule looked at nothing."""
    needed = GateAnswer(gate_id="gate-emulator", not_found=True, takers=8)
    assert not needed.decided
    assert needed.said() == "gate-emulator: not found, though 8 tasks of the scope took its slots"
    unneeded = GateAnswer(gate_id="gate-tenant:t1", not_found=True)
    assert unneeded.decided and unneeded.said() == "gate-tenant:t1: not found (no task of the scope took its slot)"
    assert GateAnswer(gate_id="g", holders=["w1", "w2"], takers=2).said() == "g: 2 slots held"
    assert GateAnswer(gate_id="g", closed=True, takers=2).decided
    mute = GateAnswer(gate_id="g", error="DEADLINE_EXCEEDED (no worker on its task queue?)")
    assert not mute.decided and mute.said() == "g: no answer (DEADLINE_EXCEEDED (no worker on its task queue?))"
