"""Prometheus metrics: what operators watch (docs/metrics.md lists every name and its meaning).

Counters and histograms live in the process where the thing happens (submits and status calls in
the worker's activities, webhooks in the gateway); gauges that are facts in Postgres (queue depth,
reserved credit, orphans) come from `metrics.collector.PostgresCollector`, one query per scrape.
All objects here are registered in prometheus_client's default registry at import.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

# Seconds from sub-second local work to hour-long provider waits.
STATE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 180, 600, 1800, 3600, 4 * 3600, 24 * 3600)
ACTIVITY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)
LAG_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)

# --- worker: activities ---------------------------------------------------------------------------
SUBMITS = Counter("reelqueue_submits", "Provider submits by their outcome (accepted, unknown, "
                  "rejected_retryable, rejected_final); unknown = the call may have created a job",
                  ["provider", "outcome"])
STATUS_CALLS = Counter("reelqueue_status_calls", "Provider job status queries (poll_job); result ok or error",
                       ["provider", "result"])
POLL_BUDGET_WAIT = Counter("reelqueue_poll_budget_wait_seconds",
                           "Seconds status calls waited for their turn in the provider's polling budget", ["provider"])
POLL_BUDGET_REFUSED = Counter("reelqueue_poll_budget_refused", "Status calls put off (retried later): the provider's "
                              "polling budget was booked further ahead than a call may wait", ["provider"])
POLL_BUDGET_LATE = Counter("reelqueue_poll_budget_late", "Turns in the polling budget let go because the status "
                           "call would have started too late after it (a loaded worker); another was booked",
                           ["provider"])
TRANSITIONS = Counter("reelqueue_transitions", "State-machine events recorded, applied or not", ["event", "applied"])
TRANSITION_CONFLICTS = Counter(
    "reelqueue_transition_conflicts",
    "Transitions that met a concurrent writer: kind=version (compare-and-set lost, re-read and retried) or "
    "kind=illegal (the task had moved elsewhere; event kept for audit, not applied)", ["kind"])
CREDIT_SPENT = Counter("reelqueue_credit_spent", "Credits charged to a tenant: SETTLE and ADJUSTMENT ledger entries, "
                      "counted by the worker that wrote them (once per business key)", ["tenant"])
STATE_SECONDS = Histogram("reelqueue_task_state_seconds", "Time a task spent in a state, observed when it leaves",
                          ["state"], buckets=STATE_BUCKETS)
ACTIVITY_SECONDS = Histogram("reelqueue_activity_seconds", "Wall time of one activity execution (transcode, "
                             "fetch_output, submit, ...) by its result (ok, error)", ["activity", "result"],
                             buckets=ACTIVITY_BUCKETS)
ACTIVITIES_IN_FLIGHT = Gauge("reelqueue_activities_in_flight", "Activity executions running now in this worker",
                             ["activity"])
ACTIVITY_SLOTS = Gauge("reelqueue_activity_slots", "Activity executions this worker runs at once (its setting)")

# --- gateway: webhooks ----------------------------------------------------------------------------
WEBHOOKS = Counter("reelqueue_webhooks", "Provider webhook deliveries by what became of them: matched, orphan, "
                   "duplicate, refused (not verified or unusable), unavailable (503, the provider retries)",
                   ["provider", "result"])
WEBHOOK_LAG = Histogram("reelqueue_webhook_lag_seconds", "From the provider's event time to the task's workflow "
                        "signaled (matched events)", ["provider"], buckets=LAG_BUCKETS)

# --- gateway: live status (GET /v1/events) ---------------------------------------------------------
EVENT_STREAMS = Gauge("reelqueue_event_streams", "Open GET /v1/events streams on this gateway process")
EVENT_STREAMS_ENDED = Counter("reelqueue_event_streams_ended", "Event streams ended by the gateway, by why: slow "
                              "(its client stopped reading), revoked (its key), expired (its time was up), shutdown "
                              "(the process is stopping); the client resumes with Last-Event-ID", ["reason"])
EVENT_FEED_QUERIES = Counter("reelqueue_event_feed_queries", "Postgres transactions of the gateway's event feed, "
                             "however many streams are open: feed (new events of every tenant), keys (revoked keys "
                             "and ended browser sessions of the open streams), lease (this gateway's stream lease)",
                             ["query", "result"])

MEDIA_UTILISATION = Gauge("reelqueue_media_utilisation", "Media activity slots busy (fetch, transcode, renditions, "
                          "checks) as a share of this worker's media slots (0..1)")
