"""What a run would cost on Temporal Cloud, in billable actions, counted from workflow histories and
from the calls the run made that no history records.

The rules are Temporal Cloud's published ones ("Temporal Cloud Actions"):

- a workflow started (client start, continue-as-new, child), except a child's own start, which its
  parent's `StartChildWorkflowExecutionInitiated` already bills as two actions;
- each activity scheduled, plus each retry (`ActivityTaskStarted.attempt` - 1);
- local activities: one action per workflow task whose commands recorded markers (every marker of
  that task together), plus each local-activity retry the task reports in its metering metadata;
- each timer started (the SDK's implicit timers are `TimerStarted` events too);
- each signal: a client's (webhooks, CLI, gateway) is billed where it lands, one sent by a workflow
  where it leaves (`SignalExternalWorkflowExecutionInitiated`; its `WorkflowExecutionSignaled` in the
  target carries the sender and is not billed again), so each signal counts once whichever of the
  two histories is read; a signal-with-start that started the workflow is one action, not two;
- each update accepted (rejected ones are billed too but leave no event: counted from outside);
- each search-attribute upsert after the start, except one that sets only `TemporalChangeVersion`
  (the SDK's record of patches);
- workflow options updated, resets, Nexus operations scheduled or cancelled.

Not in any history, so counted from the server's request counters (`outside_actions`): queries and
activity heartbeats that reach the server (the SDK throttles them). Workflow-task heartbeats are
left out (the pipeline has no workflow task that long).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.api.history.v1 import HistoryEvent

CHANGE_VERSION = "TemporalChangeVersion"
# Frontend request names (the server's `service_requests{operation=...}`) billed one action each.
OUTSIDE_BILLED = {"QueryWorkflow": "query", "RecordActivityTaskHeartbeat": "activity_heartbeat",
                  "RecordActivityTaskHeartbeatById": "activity_heartbeat"}

_TASK_FAILED = EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
_RESET = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW  # a reset is billed
_ONE_EACH = {
    EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED: "activity_scheduled",
    EventType.EVENT_TYPE_TIMER_STARTED: "timer_started",
    EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED: "signal_sent_by_workflow",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED: "update_accepted",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_OPTIONS_UPDATED: "options_updated",
    EventType.EVENT_TYPE_NEXUS_OPERATION_SCHEDULED: "nexus_operation",
    EventType.EVENT_TYPE_NEXUS_OPERATION_CANCEL_REQUESTED: "nexus_operation",
}


def history_actions(events: Iterable[HistoryEvent]) -> Counter[str]:
    """The billable actions one workflow run's history records, by kind."""
    out: Counter[str] = Counter()
    task_with_markers: set[int] = set()
    current_task = 0  # the WorkflowTaskCompleted whose commands the following events are
    previous: HistoryEvent | None = None
    for e in events:
        kind = e.event_type
        if kind in _ONE_EACH:
            out[_ONE_EACH[kind]] += 1
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            if not e.workflow_execution_started_event_attributes.HasField("parent_workflow_execution"):
                out["workflow_started"] += 1
        elif kind == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            out["child_workflow_started"] += 2
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            out["activity_retried"] += max(0, e.activity_task_started_event_attributes.attempt - 1)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            current_task = e.event_id
            retries = e.workflow_task_completed_event_attributes.metering_metadata
            out["local_activity_retried"] += retries.nonfirst_local_activity_execution_attempts
        elif kind == EventType.EVENT_TYPE_MARKER_RECORDED:
            task_with_markers.add(current_task)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            out.update(_signal(e, previous))
        elif kind == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            names = set(e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields)
            if names - {CHANGE_VERSION}:
                out["search_attributes_upserted"] += 1
        elif kind == _TASK_FAILED and e.workflow_task_failed_event_attributes.cause == _RESET:
            out["workflow_reset"] += 1
        previous = e
    out["workflow_tasks_with_local_activities"] += len(task_with_markers)
    return +out  # drop the zeros


def _signal(e: HistoryEvent, previous: HistoryEvent | None) -> Counter[str]:
    """A signal's action, where it is billed: a signal-with-start that started the run takes the
    start's action over (one for both)."""
    if e.workflow_execution_signaled_event_attributes.HasField("external_workflow_execution"):
        return Counter()  # billed in the sender's history
    if previous is not None and previous.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED \
            and e.event_id == 2:
        return Counter({"signal_with_start": 1, "workflow_started": -1})  # one action for both
    return Counter({"signal_received": 1})


def outside_actions(requests: Mapping[str, float]) -> Counter[str]:
    """Actions from the frontend's request counts over the run (operation -> requests): queries and
    activity heartbeats. (Nothing here sends the SDK's unbilled metadata query, so every query counts.)"""
    out: Counter[str] = Counter()
    for operation, kind in OUTSIDE_BILLED.items():
        out[kind] += round(requests.get(operation, 0.0))
    return +out


def total(actions: Mapping[str, int]) -> int:
    """All the actions of a breakdown (the local-activity line counts workflow tasks, one action each)."""
    return sum(actions.values())
