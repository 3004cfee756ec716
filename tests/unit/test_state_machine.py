"""Properties of the task state machine (hypothesis)."""

from hypothesis import given
from hypothesis import strategies as st

from schema import state_machine as sm

statuses = st.sampled_from(list(sm.TaskStatus))
events = st.sampled_from(list(sm.TaskEvent))


@given(statuses, events, st.integers(min_value=0, max_value=10_000))
def test_only_table_rows_are_accepted_and_each_adds_one_to_the_version(status, event, version):
    expected = sm.TRANSITIONS.get((status, event))
    if expected is None:
        try:
            sm.apply(status, version, event)
        except sm.IllegalTransition as exc:
            assert exc.status is status and exc.event is event
        else:
            raise AssertionError(f"{status} --{event}--> accepted although not in the table")
    else:
        t = sm.apply(status, version, event)
        assert (t.from_status, t.to_status) == (status, expected)
        assert t.to_version == version + 1


@given(st.sampled_from(sorted(sm.TERMINAL)), st.lists(events, max_size=20))
def test_terminal_states_are_sticky(status, later_events):
    """Nothing a workflow, a webhook or a poll sends moves a finished task; only an operator's
    redrive starts a new run, and never of a task that produced its video (or was rejected)."""
    for event in later_events:
        to = sm.target(status, event)
        if event is sm.TaskEvent.REDRIVE and status in sm.REDRIVABLE:
            assert to is sm.TaskStatus.CREATED
        else:
            assert to is None


def test_succeeded_and_rejected_are_never_redriven():
    assert sm.target(sm.TaskStatus.SUCCEEDED, sm.TaskEvent.REDRIVE) is None
    assert sm.target(sm.TaskStatus.REJECTED, sm.TaskEvent.REDRIVE) is None


@given(st.lists(events, max_size=60))
def test_any_event_sequence_stays_inside_the_table(sequence):
    status, version = sm.TaskStatus.CREATED, 0
    for event in sequence:
        to = sm.target(status, event)
        if to is None:
            continue
        assert (status, event) in sm.TRANSITIONS
        t = sm.apply(status, version, event)
        status, version = t.to_status, t.to_version
    assert version <= len(sequence)


def test_main_line_reaches_succeeded():
    path = [
        sm.TaskEvent.VALIDATION_STARTED, sm.TaskEvent.VALIDATION_PASSED, sm.TaskEvent.QUEUED,
        sm.TaskEvent.DISPATCH_CLAIMED, sm.TaskEvent.PROVIDER_ACCEPTED, sm.TaskEvent.PROVIDER_RUNNING,
        sm.TaskEvent.PROVIDER_SUCCEEDED, sm.TaskEvent.OUTPUT_PERSISTED, sm.TaskEvent.PLAYABLE_ASSET_READY,
    ]
    status, version = sm.TaskStatus.CREATED, 0
    for event in path:
        t = sm.apply(status, version, event)
        status, version = t.to_status, t.to_version
    assert status is sm.TaskStatus.SUCCEEDED and version == len(path)


def test_seed_rows_that_matter_for_money():
    S, E = sm.TaskStatus, sm.TaskEvent
    # An ambiguous submit goes to reconciliation, never straight to a new attempt.
    assert sm.target(S.DISPATCHING, E.SUBMIT_AMBIGUOUS) is S.SUBMIT_UNKNOWN
    assert sm.target(S.SUBMIT_UNKNOWN, E.DISPATCH_CLAIMED) is None
    assert sm.target(S.SUBMIT_UNKNOWN, E.CONFIRMED_NOT_CREATED) is S.RETRY_WAIT
    # Cancel before dispatch ends the task; after, it is only an intent.
    assert sm.target(S.QUEUED, E.CANCEL_REQUESTED) is S.CANCELED
    assert sm.target(S.RUNNING, E.CANCEL_REQUESTED) is S.CANCEL_REQUESTED
    assert sm.target(S.CANCEL_REQUESTED, E.COMPLETION_WON) is S.OUTPUT_FETCHING
    # Success may skip RUNNING but cannot be forged from CREATED.
    assert sm.target(S.SUBMITTED, E.PROVIDER_SUCCEEDED) is S.OUTPUT_FETCHING
    assert sm.target(S.CREATED, E.PLAYABLE_ASSET_READY) is None
    # A late RUNNING never overwrites a later state.
    assert sm.target(S.OUTPUT_FETCHING, E.PROVIDER_RUNNING) is None
    assert sm.target(S.SUCCEEDED, E.PROVIDER_RUNNING) is None
