"""The submit, reconcile and poll activities against real Postgres (and the real emulator where a
real provider is needed), run in Temporal's ActivityEnvironment. A scripted provider stands in for
an outside provider where a test needs answers no real one gives on demand (a late answer, a
provider without a lookup)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy import select, update
from stack_helpers import claim_dispatch, import_small
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.errors import DISPATCH_NOT_CLAIMED, NOT_YET_CONCLUSIVE, PROVIDER_REFUSED
from activities.poll import PollActivities
from activities.submit import SubmitActivities, request_key
from adapters.providers.base import Capabilities, GenerationRequest, JobState, ProviderError, SubmitResult, Usage
from adapters.providers.emulator import EmulatorProvider
from adapters.storage import ObjectStorage
from contracts.admission import SlotRenewal
from contracts.messages import (
    AttemptRef,
    JobRef,
    ReconcileOutcome,
    StrayCostAcceptance,
    StrayJobRef,
    SubmitActivityResult,
    TaskRef,
    TransitionInput,
)
from contracts.provider import JobStatus, SubmitOutcome
from contracts.task import TaskEvent as E
from contracts.task import TaskStatus as S
from schema import ledger_check, queries
from schema.db import Database
from schema.models import Attempt, CreditEntry, StateEvent, StrayJob, Task

pytestmark = pytest.mark.integration


class ScriptedProvider:
    """An outside provider whose answers the test sets (named like the task's provider)."""

    def __init__(self, name: str, *, can_reconcile: bool = True, window_s: float = 30.0):
        self.name = name
        self.capabilities = Capabilities(reconcile_by_request_key=can_reconcile, acceptance_window_s=window_s,
                                         submit_timeout_s=20.0)
        self.answer = SubmitResult(outcome=SubmitOutcome.UNKNOWN, provider=name, request_key="")
        self.jobs: list[str] = []
        self.release: threading.Event | None = None
        self.status_error: ProviderError | None = None

    def submit(self, request: GenerationRequest) -> SubmitResult:
        if self.release is not None:
            self.release.wait(30)
        return self.answer.model_copy(update={"request_key": request.request_key})

    def find_by_request_key(self, key: str) -> list[JobState]:
        return [JobState(provider=self.name, job_id=j, request_key=key, status=JobStatus.RUNNING,
                         raw_status="running") for j in self.jobs]

    def get_job(self, job_id: str) -> JobState:
        if self.status_error:
            raise self.status_error
        return JobState(provider=self.name, job_id=job_id, status=JobStatus.RUNNING, raw_status="running")

    def cancel(self, job_id: str) -> JobState:
        if self.status_error:
            raise self.status_error
        return JobState(provider=self.name, job_id=job_id, status=JobStatus.CANCELED, raw_status="canceled",
                        usage=Usage(cost=0.5))


@pytest.fixture
def one_task(stack, tmp_path) -> Task:
    summary = import_small(stack, tmp_path, [("S-1", "Stool", "A stool")], duration_s=1)
    with Database(stack.database_url).transaction() as session:
        (task,) = queries.list_tasks(session, summary.import_id)
    claim_dispatch(stack.database_url, task.id)
    return task


def activities(stack, provider) -> tuple[SubmitActivities, PollActivities]:
    db = Database(stack.database_url)
    providers = {provider.name: provider}
    return (SubmitActivities(db, ObjectStorage.from_settings(stack), providers, "test-worker"),
            PollActivities(db, providers))


def attempt_row(stack, task_id: str, attempt_no: int = 1) -> Attempt:
    with Database(stack.database_url).transaction() as session:
        return session.scalar(select(Attempt).where(Attempt.task_id == task_id, Attempt.attempt_no == attempt_no))


def age_call(stack, task_id: str, seconds: float) -> None:
    """Pretend our submit call ended `seconds` ago."""
    with Database(stack.database_url).transaction() as session:
        session.execute(update(Attempt).where(Attempt.task_id == task_id).values(
            call_ended_at=datetime.now(UTC) - timedelta(seconds=seconds)))


def recording(task: Task) -> tuple[ScriptedProvider, list[str]]:
    """A provider that only records the request keys it is sent."""
    provider = ScriptedProvider(task.provider)
    sent: list[str] = []
    provider.submit = lambda request: sent.append(request.request_key)  # type: ignore[method-assign]
    return provider, sent


def test_a_task_not_dispatching_is_never_sent(stack, one_task):
    """The last line of defence behind the state machine: a dispatch it refused sends nothing."""
    provider, sent = recording(one_task)
    submit, _ = activities(stack, provider)
    with Database(stack.database_url).transaction() as session:
        session.get(Task, one_task.id).status = "QUEUED"
    with pytest.raises(ApplicationError) as refused:
        ActivityEnvironment().run(submit.submit, AttemptRef(task_id=one_task.id, attempt_no=1))
    assert refused.value.type == DISPATCH_NOT_CLAIMED and refused.value.non_retryable
    assert sent == [] and attempt_row(stack, one_task.id) is None


def test_absent_is_concluded_only_after_the_window_from_the_call_end(stack, one_task):
    provider = ScriptedProvider(one_task.provider, window_s=30)
    submit, _ = activities(stack, provider)
    ref = AttemptRef(task_id=one_task.id, attempt_no=1)
    env = ActivityEnvironment()
    assert env.run(submit.submit, ref).outcome is SubmitOutcome.UNKNOWN
    # sent_at may be long past; what counts is when the call ended (just now)
    with Database(stack.database_url).transaction() as session:
        session.execute(update(Attempt).where(Attempt.task_id == one_task.id).values(
            sent_at=datetime.now(UTC) - timedelta(minutes=5)))
    with pytest.raises(ApplicationError) as early:
        env.run(submit.reconcile_submit, ref)
    assert early.value.type == NOT_YET_CONCLUSIVE and not early.value.non_retryable
    assert attempt_row(stack, one_task.id).submit_state == "UNKNOWN"
    age_call(stack, one_task.id, 31)
    result = env.run(submit.reconcile_submit, ref)
    assert result.outcome is ReconcileOutcome.ABSENT
    assert attempt_row(stack, one_task.id).submit_state == "FAILED_BEFORE_ACCEPT"


def test_a_run_that_died_mid_call_waits_for_the_submit_timeout_too(stack, one_task):
    provider = ScriptedProvider(one_task.provider, window_s=5)
    submit, _ = activities(stack, provider)
    ref = AttemptRef(task_id=one_task.id, attempt_no=1)
    with Database(stack.database_url).transaction() as session:  # transaction A committed, then the worker died
        session.add(Attempt(task_id=one_task.id, attempt_no=1, provider=one_task.provider, model=one_task.model,
                            request_key=request_key(one_task.id, 1), submit_state="SENDING", request_fingerprint="x",
                            sent_at=datetime.now(UTC) - timedelta(seconds=10), updated_at=datetime.now(UTC)))
    with pytest.raises(ApplicationError) as early:  # 10 s < 20 s submit timeout + 5 s window
        ActivityEnvironment().run(submit.reconcile_submit, ref)
    assert early.value.type == NOT_YET_CONCLUSIVE


def test_a_provider_that_cannot_be_asked_is_never_concluded_absent(stack, one_task):
    provider = ScriptedProvider(one_task.provider, can_reconcile=False)
    submit, _ = activities(stack, provider)
    ref = AttemptRef(task_id=one_task.id, attempt_no=1)
    env = ActivityEnvironment()
    env.run(submit.submit, ref)
    age_call(stack, one_task.id, 3600)
    result = env.run(submit.reconcile_submit, ref)
    assert result.outcome is ReconcileOutcome.NOT_ASKABLE
    assert attempt_row(stack, one_task.id).submit_state == "UNKNOWN"


def late_job(task: Task) -> str:
    return f"late-{task.id[:12]}"  # provider job ids are unique across tasks


def late_answer(stack, task: Task, provider: ScriptedProvider, submit: SubmitActivities) -> SubmitActivityResult:
    """A submit whose answer (job `late_job(task)` accepted) comes after reconcile concluded
    "absent"; what that submit run returns."""
    ref = AttemptRef(task_id=task.id, attempt_no=1)
    provider.release = threading.Event()
    provider.answer = SubmitResult(outcome=SubmitOutcome.ACCEPTED, provider=provider.name, request_key="",
                                   job_id=late_job(task))
    answers = []
    slow = threading.Thread(target=lambda: answers.append(ActivityEnvironment().run(submit.submit, ref)))
    slow.start()
    for _ in range(100):
        row = attempt_row(stack, task.id)
        if row is not None:
            break
        threading.Event().wait(0.05)
    with Database(stack.database_url).transaction() as session:
        session.execute(update(Attempt).where(Attempt.task_id == task.id).values(
            sent_at=datetime.now(UTC) - timedelta(minutes=5)))
    assert ActivityEnvironment().run(submit.reconcile_submit, ref).outcome is ReconcileOutcome.ABSENT
    provider.release.set()
    slow.join(30)
    return answers[0]


def test_a_late_answer_cannot_overwrite_the_conclusion(stack, one_task):
    """The original submit's second write comes after reconcile concluded "absent": the conclusion
    stands (compare-and-set) and the job the late answer names is kept as a stray job."""
    provider = ScriptedProvider(one_task.provider, window_s=0)
    submit, _ = activities(stack, provider)
    answer = late_answer(stack, one_task, provider, submit)
    assert answer.outcome is SubmitOutcome.REJECTED_RETRYABLE  # what the attempt says, not the late answer
    row = attempt_row(stack, one_task.id)
    assert row.submit_state == "FAILED_BEFORE_ACCEPT" and row.provider_job_id is None
    with Database(stack.database_url).transaction() as session:
        stray = session.scalar(select(StrayJob).where(StrayJob.task_id == one_task.id))
    assert (stray.provider_job_id, stray.found_by, stray.accounted) == (late_job(one_task), "late_answer", False)


def stray_rules(stack, task: Task) -> list[str]:
    """`ledger check`'s stray rule for the task, once it is finished."""
    with Database(stack.database_url).transaction() as session:
        session.execute(update(Task).where(Task.id == task.id).values(status="FAILED_FINAL"))
        return [v.detail for v in ledger_check.check(session, task.import_id).violations
                if v.rule is ledger_check.Rule.STRAY_UNACCOUNTED]


def adjustments(stack, task: Task) -> list[tuple[str, Decimal, str]]:
    with Database(stack.database_url).transaction() as session:
        return [(c.provider_job_id, c.amount, c.note) for c in session.scalars(
            select(CreditEntry).where(CreditEntry.task_id == task.id, CreditEntry.entry_type == "ADJUSTMENT"))]


def test_a_late_answer_stray_is_found_and_accounted(stack, one_task):
    """Nobody told the workflow about the late answer's job: it asks the database for the task's
    unaccounted strays before its ledger closes, and accounts each (cancel, cost, ADJUSTMENT)."""
    provider = ScriptedProvider(one_task.provider, window_s=0)
    submit, poll = activities(stack, provider)
    late_answer(stack, one_task, provider, submit)
    env = ActivityEnvironment()
    (stray,) = env.run(poll.unaccounted_strays, TaskRef(task_id=one_task.id))
    assert stray == StrayJobRef(task_id=one_task.id, attempt_no=1, job_id=late_job(one_task))
    assert len(stray_rules(stack, one_task)) == 1  # unaccounted: `ledger check` says so
    assert env.run(poll.account_stray_job, stray).cost == 0.5
    assert env.run(poll.unaccounted_strays, TaskRef(task_id=one_task.id)) == []
    assert [(job, amount) for job, amount, _ in adjustments(stack, one_task)] == [(late_job(one_task), Decimal("0.5"))]
    assert stray_rules(stack, one_task) == []


def test_a_refused_stray_is_booked_at_the_estimate_on_a_persons_word(stack, one_task):
    """The provider refuses to answer for the duplicate (cancel and status both 4xx): a person
    accepts its cost as unknown; the task's estimate is booked once, noted, and the stray is
    accounted for `ledger check`."""
    provider = ScriptedProvider(one_task.provider, window_s=0)
    submit, poll = activities(stack, provider)
    late_answer(stack, one_task, provider, submit)
    provider.status_error = ProviderError("POST /jobs/{id}/cancel: 404 no such job", retryable=False,
                                          http_status=404)
    env = ActivityEnvironment()
    (stray,) = env.run(poll.unaccounted_strays, TaskRef(task_id=one_task.id))
    with pytest.raises(ApplicationError) as refused:
        env.run(poll.account_stray_job, stray)
    assert refused.value.type == PROVIDER_REFUSED and refused.value.non_retryable
    decision = StrayCostAcceptance(stray=stray, by="ops", reason="checked the dashboard")
    assert env.run(poll.accept_stray_cost, decision) == float(one_task.estimated_cost)
    assert env.run(poll.accept_stray_cost, decision) == float(one_task.estimated_cost)  # once
    ((job, amount, note),) = adjustments(stack, one_task)
    assert (job, amount) == (late_job(one_task), one_task.estimated_cost)
    assert "cost unknown" in note and "accepted by ops: checked the dashboard" in note
    assert stray_rules(stack, one_task) == []


def two_jobs_for_one_key(stack, task: Task) -> tuple[EmulatorProvider, SubmitActivities, PollActivities, str, str]:
    """An unknown submit (attempt 1) for which the emulator holds two jobs, oldest first."""
    emulator = EmulatorProvider(stack.emulator_url, stack.emulator_api_key)
    submit, poll = activities(stack, emulator)
    request = GenerationRequest(request_key=request_key(task.id, 1), model=task.model, prompt="p",
                                aspect_ratio="9:16", duration_s=1.0)
    first, second = emulator.submit(request).job_id, emulator.submit(request).job_id
    with Database(stack.database_url).transaction() as session:
        session.add(Attempt(task_id=task.id, attempt_no=1, provider=emulator.name, model=task.model,
                            request_key=request.request_key, submit_state="UNKNOWN", request_fingerprint="x",
                            sent_at=datetime.now(UTC), call_ended_at=datetime.now(UTC), updated_at=datetime.now(UTC)))
    return emulator, submit, poll, first, second


def test_duplicates_are_kept_cancelled_and_costed(stack, one_task):
    """Two jobs at the emulator for one request key: reconcile follows the oldest and keeps the
    other as a stray job, which is cancelled and recorded as an ADJUSTMENT with its job id."""
    emulator, submit, poll, first, second = two_jobs_for_one_key(stack, one_task)
    ref = AttemptRef(task_id=one_task.id, attempt_no=1)
    env = ActivityEnvironment()
    found = env.run(submit.reconcile_submit, ref)
    assert (found.outcome, found.job_id, found.duplicates) == (ReconcileOutcome.FOUND, first, [second])
    stray = env.run(poll.account_stray_job, StrayJobRef(task_id=one_task.id, attempt_no=1, job_id=second))
    assert stray.status is JobStatus.CANCELED
    assert emulator.get_job(second).status is JobStatus.CANCELED
    with Database(stack.database_url).transaction() as session:
        adjustment = session.scalar(select(CreditEntry).where(CreditEntry.task_id == one_task.id,
                                                              CreditEntry.entry_type == "ADJUSTMENT"))
        kept = session.scalar(select(StrayJob).where(StrayJob.provider_job_id == second))
    assert adjustment.provider_job_id == second and adjustment.amount == Decimal(str(stray.cost))
    assert kept.accounted
    emulator.cancel(first)


def test_a_retried_reconcile_returns_the_duplicates_it_found(stack, one_task):
    """The first run commits its findings and its answer is lost (the worker killed after the
    commit, or the timeout): the retry answers from what the database records, duplicates
    included, so the workflow still accounts every one of them."""
    emulator, submit, poll, first, second = two_jobs_for_one_key(stack, one_task)
    ref = AttemptRef(task_id=one_task.id, attempt_no=1)
    env = ActivityEnvironment()
    lost = env.run(submit.reconcile_submit, ref)
    retried = env.run(submit.reconcile_submit, ref)
    assert retried == lost
    assert (retried.outcome, retried.job_id, retried.duplicates) == (ReconcileOutcome.FOUND, first, [second])
    env.run(poll.account_stray_job, StrayJobRef(task_id=one_task.id, attempt_no=1, job_id=second))
    assert env.run(submit.reconcile_submit, ref).duplicates == []  # accounted: nothing left to do
    emulator.cancel(first)


def test_a_refused_status_call_is_not_retried(stack, one_task):
    provider = ScriptedProvider(one_task.provider)
    provider.status_error = ProviderError("GET /jobs/j: 404 no such job", retryable=False, http_status=404)
    _, poll = activities(stack, provider)
    with pytest.raises(ApplicationError) as refused:
        ActivityEnvironment().run(poll.poll_job, JobRef(task_id=one_task.id, attempt_no=1, job_id="j"))
    assert refused.value.type == PROVIDER_REFUSED and refused.value.non_retryable
    provider.status_error = ProviderError("GET /jobs/j: 503", retryable=True, http_status=503)
    with pytest.raises(ProviderError):  # an outage stays retryable
        ActivityEnvironment().run(poll.poll_job, JobRef(task_id=one_task.id, attempt_no=1, job_id="j"))


def test_an_unknown_task_is_a_business_failure(stack):
    provider = ScriptedProvider("emulator")
    submit, _ = activities(stack, provider)
    with pytest.raises(ApplicationError) as missing:
        ActivityEnvironment().run(submit.submit, AttemptRef(task_id="no-such-task", attempt_no=1))
    assert missing.value.type == "TaskNotFound" and missing.value.non_retryable


class _ToldGate:
    """Stands in for GateNotices (the worker's client): what the submit step told which gate."""

    def __init__(self) -> None:
        self.told: list[tuple[str, SlotRenewal]] = []

    def renew(self, gate_id: str, renewal: SlotRenewal) -> bool:
        self.told.append((gate_id, renewal))
        return True


def _move(task_id: str, n: int, event: E) -> TransitionInput:
    return TransitionInput(task_id=task_id, event=event, source_event_id=f"{task_id}:{n}:{event.value}")


def _events(stack, task_id: str) -> list[tuple[str, bool, dict]]:
    with Database(stack.database_url).transaction() as session:
        rows = session.execute(select(StateEvent.event, StateEvent.applied, StateEvent.payload)
                               .where(StateEvent.task_id == task_id).order_by(StateEvent.id)).all()
    return [tuple(r) for r in rows]


def test_submit_commits_the_dispatch_with_its_intent_and_the_acceptance_with_its_answer(stack, one_task):
    """transition-in-work-v2: transaction A moves the task to DISPATCHING with the attempt's intent, B to
    SUBMITTED with the job id; a retried step sends nothing again and reports the same moves."""
    provider = ScriptedProvider(one_task.provider)
    provider.answer = SubmitResult(outcome=SubmitOutcome.ACCEPTED, provider=provider.name, request_key="",
                                   job_id="job-carried", http_status=200)
    sent: list[str] = []
    answer = provider.submit
    provider.submit = lambda request: sent.append(request.request_key) or answer(request)  # type: ignore[method-assign]
    _, poll = activities(stack, provider)
    gate = _ToldGate()
    submit = SubmitActivities(Database(stack.database_url), ObjectStorage.from_settings(stack),
                              {provider.name: provider}, "test-worker", gate=gate)  # type: ignore[arg-type]
    with Database(stack.database_url).transaction() as session:
        session.get(Task, one_task.id).status = S.QUEUED.value
    renewal = SlotRenewal(workflow_id="gen-x", token=3, accepted=True)
    ref = AttemptRef(task_id=one_task.id, attempt_no=1, moves=[_move(one_task.id, 4, E.DISPATCH_CLAIMED)],
                     accepted=_move(one_task.id, 5, E.PROVIDER_ACCEPTED), gate_id="gate-x", renewal=renewal)
    result = ActivityEnvironment().run(submit.submit, ref)
    assert result.outcome is SubmitOutcome.ACCEPTED and result.job_id == "job-carried"
    assert [(m.applied, m.status) for m in result.moved] == [(True, S.DISPATCHING), (True, S.SUBMITTED)]
    assert result.renewed and gate.told == [("gate-x", renewal)], "renew-in-submit-v1: the gate is told after B"
    again = ActivityEnvironment().run(submit.submit, ref)
    assert again.outcome is SubmitOutcome.ACCEPTED and sent == [request_key(one_task.id, 1)]
    assert [(m.applied, m.status) for m in again.moved] == [(True, S.SUBMITTED)] * 2
    assert again.renewed and len(gate.told) == 2, "told again by a step that ran again (the gate counts it once)"
    assert _events(stack, one_task.id)[-2:] == [("dispatch_claimed", True, {}),
                                                 ("provider_accepted", True, {"job_id": "job-carried"})]
    # poll_job commits the move offered for the status it observes, with the attempt's row
    job = JobRef(task_id=one_task.id, attempt_no=1, job_id="job-carried",
                 move_on={JobStatus.RUNNING: _move(one_task.id, 6, E.PROVIDER_RUNNING),
                          JobStatus.SUCCEEDED: _move(one_task.id, 6, E.PROVIDER_SUCCEEDED)})
    polled = ActivityEnvironment().run(poll.poll_job, job)
    assert polled.status is JobStatus.RUNNING and [(m.applied, m.status) for m in polled.moved] == [
        (True, S.RUNNING)]
    assert attempt_row(stack, one_task.id).submit_state == "RUNNING"
    assert [e for e, _, _ in _events(stack, one_task.id)][-1] == "provider_running"


def test_a_dispatch_the_table_refuses_is_recorded_and_nothing_is_sent(stack, one_task):
    provider, sent = recording(one_task)
    submit, _ = activities(stack, provider)
    with Database(stack.database_url).transaction() as session:
        session.get(Task, one_task.id).status = S.CANCELED.value  # `reelqueue cancel` while it waited
    ref = AttemptRef(task_id=one_task.id, attempt_no=1, moves=[_move(one_task.id, 4, E.DISPATCH_CLAIMED)])
    with pytest.raises(ApplicationError) as refused:
        ActivityEnvironment().run(submit.submit, ref)
    assert refused.value.type == DISPATCH_NOT_CLAIMED and refused.value.non_retryable
    assert sent == [] and attempt_row(stack, one_task.id) is None
    event, applied, _ = _events(stack, one_task.id)[-1]
    assert (event, applied) == ("dispatch_claimed", False), "the refusal is on record, as record_transition left it"
