"""GenerationWorkflow's public surface: its name, id rule, task queue and message names.

Everything outside the workflow (CLI, gateway, tests) reaches it through these names, so a rename
happens here once.
"""

from __future__ import annotations

from config.defaults import DEFAULT_TASK_QUEUE

WORKFLOW_NAME = "GenerationWorkflow"

# Task queues by kind of work (docs/deploy.md, "Task queues and workers"). The io queue is the one a
# workflow is started on (REELQUEUE_TASK_QUEUE): workflow tasks, database steps, provider calls. Media
# steps (download, ffmpeg, checks) go to the media queue named after it, so every deployment and every
# test queue has its own pair without a second setting to keep in step.
IO, MEDIA = "io", "media"
MEDIA_ACTIVITIES = ("fetch_output", "transcode", "transcode_proxy", "make_renditions", "check_output", "make_media")


def media_queue(task_queue: str) -> str:
    """The media queue of the io queue `task_queue`."""
    return f"{task_queue}-media"


SIGNAL_CANCEL = "cancel"  # CancelRequest: stop the task (an intent; the provider job is cancelled)
SIGNAL_PROVIDER_UPDATE = "provider_update"  # ProviderUpdate: a webhook saw a change, poll now
UPDATE_RESOLVE = "resolve"  # ResolveRequest -> ResolveResult: an operator's decision on NEEDS_ATTENTION
UPDATE_REVIEW = "review"  # ReviewRequest -> ReviewResult: a reviewer's decision on a task in REVIEW
QUERY_STATUS = "status"  # the task status as the workflow knows it
QUERY_DETAILS = "details"  # LiveDetails: what the task does now (also the Web UI's current details)
SIGNAL_PAUSE = "pause"  # PauseRequest: the task's import was paused or resumed
SIGNAL_SLOT_GRANTED = "slot_granted"  # SlotGrant: the provider's gate admitted this task
SIGNAL_SLOT_CHECK = "slot_check"  # SlotGrant: the gate asks whether the holder still exists (lease probe)
SIGNAL_TENANT_SLOT_GRANTED = "tenant_slot_granted"  # SlotGrant: the task's tenant gate admitted it
SIGNAL_MODEL_SLOT_GRANTED = "model_slot_granted"  # SlotGrant: its provider's model's gate admitted it
SIGNAL_PLATFORM_SLOT_GRANTED = "platform_slot_granted"  # SlotGrant: the platform's gate admitted it

# ProviderGateWorkflow: one per provider, admission control shared by every worker.
GATE_WORKFLOW_NAME = "ProviderGateWorkflow"
SIGNAL_GATE_REQUEST = "request"  # SlotRequest
SIGNAL_GATE_RELEASE = "release"  # SlotRelease
SIGNAL_GATE_RENEW = "renew"  # SlotRenewal
UPDATE_GATE_ASK = "ask"  # SlotRequest -> SlotGrant | None: the slot at once when one is free (grant-at-once-v1)
QUERY_GATE_SNAPSHOT = "snapshot"  # GateSnapshot: limit, effective limit, in use, waiting, oldest wait
QUERY_GATE_HOLDERS = "holders"  # list[str]: the workflow ids holding a slot now (the invariant checker's)
QUERY_GATE_POSITION = "position"  # workflow id -> its place in line (1 = next), None when not waiting


# RenditionsWorkflow: the renditions step of one task run again on operator request.
RENDITIONS_WORKFLOW_NAME = "RenditionsWorkflow"


def renditions_id(task_id: str) -> str:
    """At most one renditions retry per task at a time (a finished one may be started again)."""
    return f"renditions-{task_id}"


def workflow_id(task_id: str, run: int = 1) -> str:
    """One workflow per run of a task (started with REJECT_DUPLICATE); `reelqueue retry` starts run n+1."""
    return f"gen-{task_id}" if run == 1 else f"gen-{task_id}-run{run}"


def gate_id(provider: str, task_queue: str) -> str:
    """One gate per provider and task queue (tests run their own queues side by side)."""
    return f"gate-{provider}" if task_queue == DEFAULT_TASK_QUEUE else f"gate-{provider}-{task_queue}"


def tenant_gate(tenant_id: str) -> str:
    """The name a tenant's gate runs under (a ProviderGateWorkflow whose slots are the tenant's
    concurrency): its id is `gate_id(tenant_gate(t), queue)`."""
    return f"tenant:{tenant_id}"


PLATFORM_GATE = "platform"  # the platform's gate (REELQUEUE_PLATFORM_MAX_CONCURRENT): `gate_id(PLATFORM_GATE, queue)`


def model_gate(provider: str, model: str) -> str:
    """The name the gate of one provider's model runs under (its slots are the model's limit)."""
    return f"model:{provider}:{model}"


def gate_layer(name: str) -> str:
    """The admission layer a gate's name belongs to: platform, tenant, model or provider."""
    if name == PLATFORM_GATE:
        return "platform"
    return next((layer for layer in ("tenant", "model") if name.startswith(f"{layer}:")), "provider")


# Memo of a start: the TaskStatus search attribute the starter set (shown_status of where the run begins), so
# the run's first upsert of that same value is not made (one history event and one billable action a task).
# A run started without it upserts as before, which keeps old histories replaying.
MEMO_SHOWN_STATUS = "task_status_shown"


def summary(product_id: str, template_id: str, locale: str, aspect_ratio: str) -> str:
    """The line the Web UI shows for a task's workflow."""
    return f"{product_id} · {template_id} · {locale} · {aspect_ratio}"
