"""Temporal Cloud's billing rules (bench/billing.py) on hand-built histories."""

from temporalio.api.common.v1 import Payload, SearchAttributes, WorkflowExecution
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.api.history.v1 import HistoryEvent

from bench.billing import history_actions, outside_actions, total

E = EventType


def history(*events: tuple) -> list[HistoryEvent]:
    """(event type, attributes field, attributes) triples, numbered from 1."""
    out = []
    for n, (kind, field, attrs) in enumerate(events, start=1):
        e = HistoryEvent(event_id=n, event_type=kind)
        if field:
            _fill(getattr(e, field), attrs)
        out.append(e)
    return out


def _fill(message, attrs: dict) -> None:  # noqa: ANN001 - a protobuf message
    for name, value in attrs.items():
        if isinstance(value, dict):
            _fill(getattr(message, name), value)
        elif hasattr(value, "DESCRIPTOR"):
            getattr(message, name).CopyFrom(value)
        else:
            setattr(message, name, value)


def started(**attrs) -> tuple:
    return (E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED, "workflow_execution_started_event_attributes", attrs)


def task(local_retries: int = 0) -> list[tuple]:
    """A workflow task: scheduled, started, completed (with its local-activity retries)."""
    metering = {"metering_metadata": {"nonfirst_local_activity_execution_attempts": local_retries}}
    return [(E.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED, None, None), (E.EVENT_TYPE_WORKFLOW_TASK_STARTED, None, None),
            (E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, "workflow_task_completed_event_attributes", metering)]


def activity(attempt: int = 1) -> list[tuple]:
    return [(E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, None, None),
            (E.EVENT_TYPE_ACTIVITY_TASK_STARTED, "activity_task_started_event_attributes", {"attempt": attempt}),
            (E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, None, None)]


MARKER = (E.EVENT_TYPE_MARKER_RECORDED, None, None)
COMPLETED = (E.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, None, None)


def upsert(*names: str) -> tuple:
    fields = {name: Payload(data=b'"x"') for name in names}
    return (E.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES, "upsert_workflow_search_attributes_event_attributes",
            {"search_attributes": SearchAttributes(indexed_fields=fields)})


def signaled(sender: str | None = None) -> tuple:
    attrs = {"signal_name": "s"} | ({"external_workflow_execution": WorkflowExecution(workflow_id=sender)}
                                    if sender else {})
    return (E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED, "workflow_execution_signaled_event_attributes", attrs)


def test_a_run_of_activities_bills_its_start_each_activity_and_each_retry():
    events = history(started(), *task(), *activity(), *task(), *activity(attempt=3), *task(), COMPLETED)
    counted = history_actions(events)
    assert counted == {"workflow_started": 1, "activity_scheduled": 2, "activity_retried": 2}
    assert total(counted) == 5


def test_local_activities_bill_one_action_per_workflow_task_that_recorded_markers_plus_their_retries():
    events = history(started(), *task(local_retries=1), MARKER, MARKER, MARKER, *task(), *activity(),
                     *task(), MARKER, *task(), COMPLETED)
    assert history_actions(events) == {"workflow_started": 1, "workflow_tasks_with_local_activities": 2,
                                       "local_activity_retried": 1, "activity_scheduled": 1}


def test_upserts_after_the_start_are_billed_except_the_sdks_change_version_alone():
    events = history(started(), *task(), upsert("TaskStatus"), upsert("TemporalChangeVersion"),
                     upsert("TemporalChangeVersion", "TaskStatus"), COMPLETED)
    assert history_actions(events) == {"workflow_started": 1, "search_attributes_upserted": 2}


def test_a_client_signal_bills_where_it_lands_and_a_workflows_signal_where_it_leaves():
    sender = history(started(), *task(),
                     (E.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED, None, None),
                     (E.EVENT_TYPE_EXTERNAL_WORKFLOW_EXECUTION_SIGNALED, None, None), *task(), COMPLETED)
    target = history(started(), *task(), signaled(sender="sender"), signaled(), *task(), COMPLETED)
    assert history_actions(sender) == {"workflow_started": 1, "signal_sent_by_workflow": 1}
    assert history_actions(target) == {"workflow_started": 1, "signal_received": 1}  # the client's only


def test_signal_with_start_that_starts_the_run_is_one_action():
    events = history(started(), signaled(), *task(), signaled(), COMPLETED)
    assert history_actions(events) == {"signal_with_start": 1, "signal_received": 1}


def test_timers_updates_children_and_resets():
    child = (E.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED, None, None)
    reset = (E.EVENT_TYPE_WORKFLOW_TASK_FAILED, "workflow_task_failed_event_attributes",
             {"cause": WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW})
    other_failure = (E.EVENT_TYPE_WORKFLOW_TASK_FAILED, "workflow_task_failed_event_attributes",
                     {"cause": WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND})
    events = history(started(), *task(), (E.EVENT_TYPE_TIMER_STARTED, None, None),
                     (E.EVENT_TYPE_TIMER_CANCELED, None, None), (E.EVENT_TYPE_TIMER_STARTED, None, None),
                     (E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED, None, None),
                     (E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED, None, None), child, reset, other_failure,
                     COMPLETED)
    assert history_actions(events) == {"workflow_started": 1, "timer_started": 2, "update_accepted": 1,
                                       "child_workflow_started": 2, "workflow_reset": 1}


def test_a_childs_own_start_is_billed_by_its_parent():
    child = history(started(parent_workflow_execution=WorkflowExecution(workflow_id="parent")), *task(), COMPLETED)
    assert history_actions(child) == {}


def test_queries_and_heartbeats_come_from_the_servers_request_counts():
    requests = {"QueryWorkflow": 3.0, "RecordActivityTaskHeartbeat": 5.0, "RecordActivityTaskHeartbeatById": 1.0,
                "SignalWorkflowExecution": 7.0, "DescribeNamespace": 4.0}
    assert outside_actions(requests) == {"query": 3, "activity_heartbeat": 6}
