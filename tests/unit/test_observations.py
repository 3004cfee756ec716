"""The pure reduction of provider observations used by GenerationWorkflow."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from contracts.messages import ProviderUpdate
from contracts.provider import JobStatus
from workflows.observations import (
    SAFETY_NET_FIRST_S,
    SAFETY_NET_MAX_S,
    Inbox,
    PollCadence,
    needs_status_call,
    worth_a_signal,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def update(status: JobStatus | None, event_id: str | None, at_s: float = 0, job_id: str = "j", verified=True):
    return ProviderUpdate(job_id=job_id, status=status, event_id=event_id, observed_at=T0 + timedelta(seconds=at_s),
                          verified=verified)


def test_inbox_keeps_the_newest_per_job_and_drops_repeats():
    inbox = Inbox()
    assert inbox.offer(update(JobStatus.RUNNING, "e2", 2))
    assert not inbox.offer(update(JobStatus.RUNNING, "e2", 2))  # the same webhook again
    assert not inbox.offer(update(JobStatus.QUEUED, "e1", 9))  # a later timestamp cannot undo running
    assert not inbox.offer(update(JobStatus.RUNNING, "e0", 1))  # older news of the same status
    assert inbox.offer(update(JobStatus.SUCCEEDED, "e3", 3))
    assert inbox.offer(update(JobStatus.QUEUED, "x1", 1, job_id="other"))  # jobs are kept apart
    assert inbox.take("j").status is JobStatus.SUCCEEDED and inbox.take("j") is None
    assert inbox.take("other").event_id == "x1"


def test_a_taken_observation_does_not_come_back_as_new():
    inbox = Inbox()
    inbox.offer(update(JobStatus.RUNNING, "e1", 1))
    inbox.take("j")
    assert not inbox.offer(update(JobStatus.RUNNING, "e1", 1))  # redelivered after it was acted on


def test_only_signed_progress_is_acted_on_without_asking():
    assert not needs_status_call(update(JobStatus.RUNNING, "e"))
    assert needs_status_call(update(JobStatus.RUNNING, "e", verified=False))  # unsigned: a hint
    assert needs_status_call(update(JobStatus.SUCCEEDED, "e"))  # an ending: confirm (outputs, cost)
    assert needs_status_call(update(None, "e"))


def test_only_observations_the_workflow_acts_on_are_signaled():
    assert not worth_a_signal(update(JobStatus.QUEUED, "e"))  # signed "still waiting": stored only
    assert not worth_a_signal(update(JobStatus.THROTTLED, "e"))
    assert worth_a_signal(update(JobStatus.QUEUED, "e", verified=False))  # a hint: confirm by a call
    assert worth_a_signal(update(None, "e"))
    assert worth_a_signal(update(JobStatus.RUNNING, "e"))
    assert worth_a_signal(update(JobStatus.FAILED, "e"))


def test_poll_cadence_with_and_without_webhooks():
    plain = PollCadence(webhooks=False, min_interval_s=1.0, max_s=15.0)
    assert plain.first() == 0.0 and [plain.next() for _ in range(3)] == [1.0, 1.5, 2.25]
    assert max(plain.next() for _ in range(20)) == 15.0
    net = PollCadence(webhooks=True, min_interval_s=5.0, max_s=15.0)
    assert net.first() == SAFETY_NET_FIRST_S and net.floor == 5.0
    # calls at 60 s, 180 s, 420 s: a 3-minute job whose webhooks arrive costs 2-3 status calls
    assert [net.next() for _ in range(2)] == [SAFETY_NET_FIRST_S * 2, SAFETY_NET_FIRST_S * 4]
    assert max(net.next() for _ in range(20)) == SAFETY_NET_MAX_S
