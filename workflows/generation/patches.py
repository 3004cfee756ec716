"""The `workflow.patched` ids of GenerationWorkflow, and the baselines a run asks first (each stands
for the patches listed with it, so a new run records one marker)."""

from __future__ import annotations

ADMISSION = "admission-v1"  # workflow.patched: ask the provider's gate for a slot before submitting
WEBHOOKS = "webhooks-v1"  # workflow.patched: with webhooks on, polling is a safety net
RENDITIONS = "renditions-v1"  # workflow.patched: the proxy decides SUCCEEDED; HLS/thumbnail retried on their own
REVIEW = "review-v1"  # workflow.patched: automatic checks, then REVIEW until a person decides
# workflow.patched: every unaccounted duplicate job in the database is accounted before the ledger
# closes; one the provider refuses to answer for waits for a person instead of failing the workflow.
STRAYS = "strays-v1"
JOB_DEADLINE = "job-deadline-v1"  # workflow.patched: a job's deadline counts from its accepted submit (or its finding)
WEBHOOK_WAKE = "webhook-wake-v1"  # workflow.patched: a webhook that came during a step is acted on at once
# workflow.patched: an accepted duplicate risk after a failed reconcile goes on to a new attempt (the
# abandoned one was reconciled again, found "absent" and un-counted though it may still bill)
ACCEPTED_RISK_ENDS = "accepted-risk-ends-reconcile-v1"
DECISION_WINS = "review-decision-wins-v1"  # workflow.patched: a decision landing with the review deadline wins
# workflow.patched: the task deadline bounds the wait for a slot, a waiting task re-asks its gate (which
# may have been reset or terminated), and NEEDS_ATTENTION gives the slot back while no job may run
ADMISSION_BOUNDED = "admission-bounded-v1"
TASK_QUEUES = "task-queues-v1"  # workflow.patched: media steps run on the media queue (api.media_queue)
# workflow.patched: a task of a tenant with a concurrency limit holds one of its tenant gate's slots
# while it generates (asked before the provider's gate, given back once its job succeeded or it ended)
TENANT_ADMISSION = "tenant-admission-v1"
# workflow.patched: a task of a paused import waits before asking for a slot, and leaves its gate's line
# while paused (it keeps its first place when it asks again); a job already running goes on.
IMPORT_PAUSE = "import-pause-v1"
# workflow.patched: a submit that failed as the provider's breaker counts (5xx, timeout, no connection) is
# reported to the gate: with the slot's release, or, for an unknown outcome (slot kept), by a renewal
BREAKER = "breaker-v1"
# workflow.patched: a step whose retry budget ran out on Postgres or object storage being out of reach (or
# the ledger refusing writes) runs again after a pause, until the task's deadline, instead of ending the task
DEGRADATION = "degradation-v1"
# workflow.patched: an output's fetch (and each run of it after a wait for storage) goes on its queue with a
# priority from the time its provider URL has left (workflows/queues.py `fetch_priority`)
EXPIRY_FIRST = "expiry-first-v1"
# workflow.patched: the TaskStatus search attribute is upserted only when its shown value changes
# (workflows/search_attributes.py `shown_status`: RUNNING for every step in progress)
COARSE_STATUS = "coarse-status-v1"
# workflow.patched, asked once as a run starts: a run that records it was started on code with every patch
# of IMPLIED, so none of those is asked (each would cost a marker and a TemporalChangeVersion upsert in
# every task's history). A patch added after it is asked on its own (`_patched` only answers for IMPLIED).
PATCH_BASELINE = "patch-baseline-v1"
# workflow.patched: moves that follow an activity's own write ride on its request and are committed in its
# transaction (reserve_credit takes validation_passed and queued); not in IMPLIED
TRANSITIONS_IN_WORK = "transition-in-work-v1"
IMPLIED = frozenset({ADMISSION, WEBHOOKS, RENDITIONS, REVIEW, STRAYS, JOB_DEADLINE, WEBHOOK_WAKE, ACCEPTED_RISK_ENDS,
                     DECISION_WINS, ADMISSION_BOUNDED, TASK_QUEUES, TENANT_ADMISSION, IMPORT_PAUSE, BREAKER,
                     DEGRADATION, EXPIRY_FIRST, COARSE_STATUS})
# workflow.patched, asked once as a run starts (before patch-baseline-v1, which it stands for): the moves of
# the main line ride on the steps they follow: submit's transaction A takes dispatch_claimed and B
# provider_accepted, poll_job the move for the status it observes, fetch_output output_persisted, settle the
# ending. A step that does not commit a move it was given (it failed first, or an activity worker from
# before this patch ran it) leaves it to the record_transition local activity, as before.
TRANSITIONS_CARRIED = "transition-in-work-v2"
# workflow.patched, asked first as a run starts (it stands for transition-in-work-v2 and every patch before):
# the submit step renews the slot at the gate itself once the provider accepted (the AIMD increase), after
# its transaction B; the workflow sends the renewal only when the step could not
RENEW_IN_SUBMIT = "renew-in-submit-v1"
# workflow.patched, asked first as a run starts (it stands for renew-in-submit-v1 and every patch before): a
# slot is asked with the gate's `ask` update, whose answer is the slot when the gate has one free at once;
# only a task that waits gets its grant as a signal (and spends a re-ask timer)
GRANT_AT_ONCE = "grant-at-once-v1"
# Patches asked where their path begins (none is on the main line, so none costs a common task a marker):
# a cancel that meets a slot's grant gives the slot back and ends the task before any submit
CANCEL_BEFORE_SUBMIT = "cancel-before-submit-v1"
# a paused task holds no slot of any layer: it waits before its tenant's line, and gives its tenant's slot
# back when a pause finds it asking its provider's gate (it asks both again once resumed)
PAUSE_HOLDS_NOTHING = "pause-holds-nothing-v1"
# the platform's and a model's admission layers, asked only by a task that has such a layer: the model's slot
# is held beside the tenant's while generating, the platform's is taken after the provider's and given back with it
ADMISSION_LAYERS = "admission-layers-v1"
# a takeover cancels the job this run started and follows it until the provider says it ended (the cancel
# asked again after an outage), so its cost is known before the ledger closes
TAKEOVER_FOLLOWS = "takeover-follows-job-v1"
# `resolve --fail` on a task stuck with a live job cancels that job first (abandoned only when it is the
# cancel itself that cannot be made)
FAIL_STOPS_JOB = "resolve-fail-stops-job-v1"
# a cancel that came while a paid video was fetched or transcoded is too late, review templates included
LATE_CANCEL_DELIVERS = "late-cancel-delivers-v1"
# a cancel while the task waits for a person about a live job it can stop (stuck at poll) stops it at once
ATTENTION_TAKES_CANCEL = "attention-takes-cancel-v1"
# a template without review: its proxy's automatic checks gate success (asked once the proxy is made): a
# failed check regenerates once within the paid-attempt budget, then REVIEW (or FAILED_FINAL naming the check)
CHECKS_GATE = "checks-gate-success-v1"
# a grant signal naming the slot this run last gave back may be stale (the gate no longer counts it): not
# taken as a slot; the task asks its gate again, whose answer says whether the slot is its own
STALE_GRANT = "stale-grant-v1"
# a grant of the tenant's slot a paused task gave back may land after its next ask: not taken; the
# task waits in its tenant's line for a grant the gate counts (see STALE_GRANT).
STALE_TENANT_GRANT = "stale-tenant-grant-v1"
# `resolve --accept-duplicate-risk` of an unknown submit holds that attempt's estimate beside the task's
# reservation before anything is sent again (no credit for it: the task fails); settle closes it
RISK_HELD = "duplicate-risk-held-v1"
# a task whose template names fallback routes chooses the route of each paid attempt (its providers' breakers,
# what each can make, its price within the task's credit), never leaving a route a job of it may exist on;
# asked only by such a task
ROUTE_FALLBACK = "route-fallback-v1"
# workflow.patched, asked first as a run starts (it stands for grant-at-once-v1 and every patch before): the
# steps that only write Postgres, reserve_credit and settle, run as local activities (`LOCAL_STEPS`): each
# is a marker in the workflow task that asked for it instead of an activity's three events and the
# workflow task its completion wakes
LOCAL_DB_STEPS = "local-db-steps-v1"
# workflow.patched (stood for by local-db-steps-v1): the status call that observes the job terminal gives its
# provider slot back at the gate itself, after its transaction; the workflow signals only when it could not
RELEASE_IN_STEP = "release-in-step-v1"
# workflow.patched, asked only by a task with fallback routes as it first waits in a gate's line: the look at its
# routes is a local activity (a marker, not an activity's three events and the workflow task its completion wakes),
# its spacing doubles from REROUTE_EVERY to REASK_EVERY while the routes before and at the task's own are healthy,
# and the gate is asked again only every REASK_EVERY (it was at every look): about 60 events an hour instead of 960
ROUTE_LOOK = "route-look-v1"
# workflow.patched, asked when a model's or the platform's grant signal comes: the grant counts for the gate that
# sent it (SlotGrant.gate; the model the task is on only for a gate that does not say), and a grant of the slot
# the task last gave back at that gate, landing late, is not taken
STALE_LAYER_GRANT = "stale-layer-grant-v1"
# workflow.patched, asked when such a stale layer grant comes: the gate is asked again, and its answer (the slot,
# to a holder; none, to a task in line) decides (a gate restarted by hand numbers its tokens from 1 again)
STALE_LAYER_RECHECK = "stale-layer-recheck-v1"
# workflow.patched, asked once a task has waited LONG_WAIT in its gates' lines (across its routes): it then looks at
# its routes every LONG_LOOK_EVERY and asks its gate again every LONG_REASK_EVERY whatever their health, so a
# wait of task_hours' 720 keeps its history a bounded size (docs/architecture.md, "Long waits")
LONG_WAIT_SPACING = "long-wait-spacing-v1"
# workflow.patched, asked first as a run starts (it stands for local-db-steps-v1 and every patch before, and for
# checks-gate-success-v1): one prepare step (validation, the credit hold and the moves to QUEUED: prepare_task) and
# one media step (proxy, HLS, thumbnail and the checks, and, for a task with no review to wait for, the settle and
# the ending in its last transaction: make_media) instead of two steps and their moves at each end of the task
LEAN_PATH = "lean-path-v1"
_LOCAL_DB_IMPLIED = IMPLIED | {PATCH_BASELINE, TRANSITIONS_IN_WORK, TRANSITIONS_CARRIED, RENEW_IN_SUBMIT, GRANT_AT_ONCE,
                               RELEASE_IN_STEP}
# Patches a run asks first, newest first: the first it has stands for the patches listed with it.
BASELINES = ((LEAN_PATH, _LOCAL_DB_IMPLIED | {LOCAL_DB_STEPS, CHECKS_GATE}),
             (LOCAL_DB_STEPS, _LOCAL_DB_IMPLIED),
             (GRANT_AT_ONCE, IMPLIED | {PATCH_BASELINE, TRANSITIONS_IN_WORK, TRANSITIONS_CARRIED, RENEW_IN_SUBMIT}),
             (RENEW_IN_SUBMIT, IMPLIED | {PATCH_BASELINE, TRANSITIONS_IN_WORK, TRANSITIONS_CARRIED}),
             (TRANSITIONS_CARRIED, IMPLIED | {PATCH_BASELINE, TRANSITIONS_IN_WORK}),
             (PATCH_BASELINE, IMPLIED))
