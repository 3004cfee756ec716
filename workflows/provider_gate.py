"""ProviderGateWorkflow: admission control for one provider, shared by every worker. The same
workflow is a tenant's gate (id `gate-tenant:{tenant}`, its limit the tenant's max_concurrent,
grants sent as `tenant_slot_granted`): GenerationWorkflow asks it before the provider's.

One long-lived workflow per provider (id `gate-{provider}`) hands out slots: at most `limit` jobs
alive at the provider, granted oldest request first, at most `submits_per_minute` grants a minute.
A generation task asks for a slot before it submits and gives it back once its job is terminal or
known never created. Waiting costs nothing: a waiting task is a workflow blocked on a signal.

Why a workflow and not rows in Postgres: the queue, the grants and the limit live in one
deterministic place whose every change is in its history, a waiting task needs no polling, and a
worker that dies holds nothing (slots belong to workflows, not processes). A slot whose holder
vanished without giving it back (a workflow terminated by hand) returns when its lease expires;
holders renew their lease while their job runs, and an expired lease is first checked with a
signal to its holder: a holder that still runs keeps its slot (after an outage longer than the
lease, its job may still be alive at the provider), one that is gone gives it back. Every grant
carries a fencing token: a release or
renewal with another token than the holder's current one changes nothing, so no slot is counted
twice. A provider's refusal (429, queue full) halves the effective limit and pauses grants for the
provider's Retry-After; each accepted submit raises it again by one slot (AIMD). Refusals of slots
granted before the last halving belong to the round that caused it and halve nothing more, so a
burst of refusals costs half the limit, not all of it. Failing submits (5xx, timeouts) pause grants
for their Retry-After but leave the limit alone: they open the provider's breaker
(workflows/breaker.py), no slot for a new submit until one probe after a cool-down succeeds.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import math
from datetime import datetime, timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from config.defaults import BreakerPolicy
    from contracts import workflow_api as api
    from contracts.admission import (
        BreakerMode,
        GateInput,
        GateSnapshot,
        GateState,
        Holder,
        PriorityClass,
        SlotGrant,
        SlotRelease,
        SlotRenewal,
        SlotRequest,
    )
    from workflows import breaker

LEASE = timedelta(minutes=15)  # the default; GateInput.lease_s sets it
LEASE_PROBE = "lease-probe-v1"  # expired leases are checked with the holder before they are taken back
NO_LOST_WAKEUP = "gate-wakeup-v1"  # a change during a round's grants starts the next round at once
BREAKER = "gate-breaker-v1"  # submits that fail (5xx, timeouts) open a breaker: no grants until a probe succeeds
# Only refusals halve the limit, once per round of grants; each accepted submit adds a slot back.
AIMD_ROUNDS = "gate-aimd-v2"
# An accepted renewal counts once per slot: the submit step that sends it (renew-in-submit-v1) may run again
# and send it again; one for a slot no longer held counts nothing.
RENEW_ONCE = "gate-renew-once-v1"
# A bulk request's place in line is its first ask plus BULK_LAG: it is overtaken only by requests asked
# within BULK_LAG after its own, so for at most BULK_LAG of its wait (docs/architecture.md, "Admission").
PRIORITY = "gate-priority-v1"
BULK_LAG = timedelta(minutes=5)
IDLE_WAKE = timedelta(hours=1)
HISTORY_LIMIT = 8_000  # events before the gate continues as new with its state
# The breaker in the worker's /metrics (the SDK's metrics, recorded only outside replay).
BREAKER_STATE, BREAKER_OPENS = "reelqueue_provider_breaker_state", "reelqueue_provider_breaker_opens"
# Every gate's figures in the worker's /metrics, labelled by gate and layer, as of the gate's last round.
GATE_GAUGES = {"limit": ("reelqueue_admission_limit", "Slots of an admission gate"),
               "in_use": ("reelqueue_admission_in_use", "Slots of an admission gate held"),
               "waiting": ("reelqueue_admission_waiting", "Tasks waiting in an admission gate's line"),
               "oldest_wait_s": ("reelqueue_admission_oldest_wait_seconds", "The oldest wait in a gate's line")}
MODE_VALUE = {BreakerMode.CLOSED: 0, BreakerMode.HALF_OPEN: 1, BreakerMode.OPEN: 2}


def _place(req: SlotRequest) -> datetime:
    """A request's place in line: its first ask, later for bulk work (gate-priority-v1)."""
    return req.place or req.requested_at


@workflow.defn(name=api.GATE_WORKFLOW_NAME)
class ProviderGateWorkflow:
    @workflow.init
    def __init__(self, inp: GateInput) -> None:
        # Set up here, not in run(): a signal-with-start's request is delivered before run() begins.
        self._limit, self._per_minute = max(1, inp.limit), inp.submits_per_minute
        self._lease = timedelta(seconds=inp.lease_s)
        self._state = inp.state or GateState(effective=float(self._limit))
        self._state.effective = min(self._state.effective, float(self._limit))
        self._changed = False
        self._grant_signal = inp.grant_signal or api.SIGNAL_SLOT_GRANTED  # a tenant gate grants by its own
        self._provider, self._policy = inp.provider, inp.breaker or BreakerPolicy()
        self._breaker_on = False  # gate-breaker-v1, decided when run() starts
        self._running = False  # run() began (its breaker is read): an `ask` is answered

    # -- messages -------------------------------------------------------------------------

    @workflow.signal(name=api.SIGNAL_GATE_REQUEST)
    def request(self, req: SlotRequest) -> None:
        if req.limit:  # the configuration as of this ask
            self._limit, self._per_minute = req.limit, req.submits_per_minute
            self._state.effective = min(self._state.effective, float(self._limit))
        if req.breaker:
            self._policy = req.breaker
        holder = self._state.holders.get(req.workflow_id)
        if holder is not None:  # asked again (its activity re-ran): grant the same slot again
            self._state.regrant.append(req.workflow_id)
        elif all(q.workflow_id != req.workflow_id for q in self._state.queue):
            # Oldest first: a task that asks again after a refusal keeps its place by its first ask; bulk
            # work's place is BULK_LAG later than its ask (gate-priority-v1), so interactive work asked up
            # to BULK_LAG after it goes first, and no request asked later than that ever does.
            asked = req.requested_at or workflow.now()
            lag = BULK_LAG if req.priority is PriorityClass.BULK and workflow.patched(PRIORITY) else timedelta(0)
            req = req.model_copy(update={"requested_at": asked, "place": asked + lag})
            bisect.insort(self._state.queue, req, key=_place)
        self._changed = True

    @workflow.update(name=api.UPDATE_GATE_ASK)
    async def ask(self, req: SlotRequest) -> SlotGrant | None:
        """A request answered with its slot when one is free for it now (nobody waits before it; a holder
        that asks again gets its own slot again): the task needs no grant signal (grant-at-once-v1).
        Otherwise it waits in line as a signalled request, and its grant comes as a signal."""
        if not self._running:  # a run's first task: its breaker is read as run() begins
            await workflow.wait_condition(lambda: self._running)
        self.request(req)
        holder = self._state.holders.get(req.workflow_id)
        if holder is not None and req.workflow_id in self._state.regrant:
            self._state.regrant.remove(req.workflow_id)
            return SlotGrant(token=holder.token, gate=self._provider)
        if not self._state.queue or self._state.queue[0].workflow_id != req.workflow_id or self._paused():
            return None
        room, allowed = self._room()
        if room <= 0:
            return None
        return self._hand_out(self._state.queue.pop(0), probe=allowed is not None)

    @workflow.signal(name=api.SIGNAL_GATE_RELEASE)
    def release(self, rel: SlotRelease) -> None:
        self._state.queue = [q for q in self._state.queue if q.workflow_id != rel.workflow_id]
        holder = self._state.holders.get(rel.workflow_id)
        if holder is not None and (rel.token is None or holder.token == rel.token):
            del self._state.holders[rel.workflow_id]
            if rel.token is not None:
                self._submit_outcome(rel.workflow_id, rel.failure, answered=rel.throttled)
        if rel.throttled:
            self._throttled(rel)
        self._changed = True

    def _throttled(self, rel: SlotRelease) -> None:
        """The provider turned a submit away: pause grants for its Retry-After, and on a refusal (not
        a failure, which is the breaker's) of this round's slots halve the limit. A round starts at each
        halving: slots granted before it were sent at the old limit, and their refusals say nothing new."""
        self._state.throttles += 1
        pause = workflow.now() + timedelta(seconds=max(rel.retry_after_s or 1.0, 1.0))
        self._state.paused_until = max(self._state.paused_until or pause, pause)
        rounds = workflow.patched(AIMD_ROUNDS)
        if rounds and (rel.failure is not None or (rel.token or 0) < self._state.round_from_token):
            return
        self._state.effective = max(1.0, self._state.effective / 2)
        self._state.round_from_token = self._state.next_token

    @workflow.signal(name=api.SIGNAL_GATE_RENEW)
    def renew(self, ren: SlotRenewal) -> None:
        holder = self._state.holders.get(ren.workflow_id)
        current = holder is not None and holder.token == ren.token
        if ren.accepted and workflow.patched(RENEW_ONCE):
            if not current or holder.accepted:  # a repeat, or news of a slot given back: the lease only
                if current:
                    holder.expires_at = workflow.now() + self._lease
                return
            holder.accepted = True
        if current:
            holder.expires_at = workflow.now() + self._lease
            if ren.accepted or ren.failure:
                self._submit_outcome(ren.workflow_id, ren.failure, answered=ren.accepted)
        if ren.accepted and self._state.effective < self._limit:
            step = 1.0 if workflow.patched(AIMD_ROUNDS) else 1 / self._limit
            self._state.effective = min(float(self._limit), self._state.effective + step)
            self._changed = True

    @workflow.query(name=api.QUERY_GATE_SNAPSHOT)
    def snapshot(self) -> GateSnapshot:
        oldest = min((q.requested_at for q in self._state.queue if q.requested_at), default=None)
        return GateSnapshot(
            limit=self._limit, effective=math.floor(self._state.effective), in_use=len(self._state.holders),
            waiting=len(self._state.queue), oldest_wait_s=(workflow.now() - oldest).total_seconds() if oldest else 0.0,
            granted=self._state.next_token - 1, throttles=self._state.throttles,
            paused_until=self._state.paused_until if self._paused() else None,
            breaker=breaker.mode_at(self._state.breaker, workflow.now()),
            breaker_failures=breaker.failures(self._state.breaker, self._policy, workflow.now()),
            breaker_open_until=self._state.breaker.open_until, breaker_opens=self._state.breaker.opens,
            breaker_probe_out=self._state.breaker.probe is not None,
        )

    @workflow.query(name=api.QUERY_GATE_HOLDERS)
    def holders(self) -> list[str]:
        """Who holds a slot now: a finished task among them is a slot lost (control/invariants.py)."""
        return sorted(self._state.holders)

    @workflow.query(name=api.QUERY_GATE_POSITION)
    def position(self, workflow_id: str) -> int | None:
        """A waiting task's place in line (1 = granted next); None when it does not wait here."""
        return next((i for i, q in enumerate(self._state.queue, 1) if q.workflow_id == workflow_id), None)

    # -- the loop ---------------------------------------------------------------------------

    @workflow.run
    async def run(self, inp: GateInput) -> None:
        self._breaker_on = workflow.patched(BREAKER)
        self._running = True
        while True:
            # A request or release that lands while grants are being delivered (`_grant` awaits the
            # signals) must wake the next round: clear the flag before the round, not after it.
            keep_changes = workflow.patched(NO_LOST_WAKEUP)
            if keep_changes:
                self._changed = False
            await self._expire_leases()
            await self._grant()
            self._show()
            if workflow.info().get_current_history_length() > HISTORY_LIMIT or \
                    workflow.info().is_continue_as_new_suggested():
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(GateInput(provider=inp.provider, limit=self._limit,
                                                   submits_per_minute=self._per_minute, state=self._state,
                                                   lease_s=inp.lease_s, grant_signal=inp.grant_signal,
                                                   breaker=self._policy))
            if not keep_changes:
                self._changed = False
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(lambda: self._changed, timeout=self._next_wake())

    def _next_wake(self) -> timedelta:
        """When something changes without a signal: a pause ends, a lease expires, rate room opens;
        at the latest an hour from now (an idle gate's own heartbeat: four events an hour)."""
        now = workflow.now()
        times: list[datetime] = [h.expires_at for h in self._state.holders.values()]
        if self._state.queue:
            if self._paused():
                times.append(self._state.paused_until)
            if self._per_minute and self._state.recent_grants:
                times.append(self._state.recent_grants[0] + timedelta(minutes=1))
            if self._breaker_on and self._state.breaker.mode is BreakerMode.OPEN:
                times.append(self._state.breaker.open_until)
        times.append(now + IDLE_WAKE)
        return max(min(times) - now, timedelta(seconds=1))

    async def _expire_leases(self) -> None:
        """Take back the slots whose lease ran out, unless their holder still runs (then renew)."""
        now = workflow.now()
        expired = [(wid, h) for wid, h in self._state.holders.items() if h.expires_at <= now]
        if not expired:
            return
        if workflow.patched(LEASE_PROBE):
            alive = await asyncio.gather(*(self._probe(wid, h) for wid, h in expired), return_exceptions=True)
        else:
            alive = [False] * len(expired)
        for (workflow_id, holder), still_there in zip(expired, alive, strict=True):
            if self._state.holders.get(workflow_id) is not holder:
                continue  # released or re-granted while the probe was out
            if still_there is True:
                holder.expires_at = workflow.now() + self._lease
            else:
                workflow.logger.warning("slot of %s expired without a release", workflow_id)
                del self._state.holders[workflow_id]
                breaker.forget(self._state.breaker, workflow_id)
                self._changed = True

    @staticmethod
    async def _probe(workflow_id: str, holder: Holder) -> bool:
        """A signal reaches only a running workflow: delivered means the holder is still there."""
        await workflow.get_external_workflow_handle(workflow_id).signal(api.SIGNAL_SLOT_CHECK,
                                                                        SlotGrant(token=holder.token))
        return True

    def _paused(self) -> bool:
        return self._state.paused_until is not None and workflow.now() < self._state.paused_until

    def _rate_room(self) -> int:
        if not self._per_minute:
            return 1_000_000
        cutoff = workflow.now() - timedelta(minutes=1)
        self._state.recent_grants = [t for t in self._state.recent_grants if t > cutoff]
        return max(0, self._per_minute - len(self._state.recent_grants))

    async def _grant(self) -> None:
        """Grant slots, oldest request first, while capacity, pause and rate allow."""
        grants: list[tuple[str, SlotGrant]] = []
        for workflow_id in self._state.regrant:
            holder = self._state.holders.get(workflow_id)
            if holder is not None:
                grants.append((workflow_id, SlotGrant(token=holder.token, gate=self._provider)))
        self._state.regrant = []
        room, allowed = self._room()
        while room > 0 and self._state.queue and not self._paused():
            req = self._state.queue.pop(0)
            grants.append((req.workflow_id, self._hand_out(req, probe=allowed is not None)))
            room -= 1
        results = await asyncio.gather(*(self._send(wid, grant) for wid, grant in grants), return_exceptions=True)
        for (workflow_id, grant), result in zip(grants, results, strict=True):
            if isinstance(result, BaseException):  # the task's workflow is gone: take the slot back
                holder = self._state.holders.get(workflow_id)
                if holder is not None and holder.token == grant.token:
                    del self._state.holders[workflow_id]
                    breaker.forget(self._state.breaker, workflow_id)
                    self._changed = True

    def _room(self) -> tuple[int, int | None]:
        """How many slots may be granted now (capacity, rate, breaker), and the breaker's own allowance
        (None: no limit of its own; otherwise half-open, and the next grant is its probe)."""
        room = min(math.floor(self._state.effective) - len(self._state.holders), self._rate_room())
        allowed = breaker.room(self._state.breaker, workflow.now()) if self._breaker_on else None
        if allowed is not None:
            room = min(room, allowed)
        return room, allowed

    def _hand_out(self, req: SlotRequest, *, probe: bool) -> SlotGrant:
        """A slot for `req` (taken off the line): a holder with the next fencing token and a lease."""
        if probe:  # half-open: this grant is the probe
            self._state.breaker.probe = req.workflow_id
        token = self._state.next_token
        self._state.next_token += 1
        self._state.holders[req.workflow_id] = Holder(token=token, expires_at=workflow.now() + self._lease)
        self._state.recent_grants.append(workflow.now())
        return SlotGrant(token=token, gate=self._provider)

    def _submit_outcome(self, workflow_id: str, failure: str | None, *, answered: bool) -> None:
        """A submit under `workflow_id`'s slot failed (`failure`), or the provider answered it; a slot
        given back with neither (no submit went out) frees a half-open breaker's probe."""
        if not self._breaker_on:
            return
        if failure is None and not answered:
            breaker.forget(self._state.breaker, workflow_id)
        elif breaker.record(self._state.breaker, self._policy, workflow.now(), workflow_id, failure):
            workflow.logger.warning("provider %s: breaker %s (%s)", self._provider, self._state.breaker.mode.value,
                                    failure or "probe answered")
            if self._state.breaker.mode is BreakerMode.OPEN:
                opens = workflow.metric_meter().create_counter(BREAKER_OPENS, "Times a provider's breaker opened")
                opens.add(1, {"provider": self._provider})
        self._changed = True

    def _show(self) -> None:
        """The gate's figures and the breaker in the Web UI (the gate's current details) and the worker's
        metrics; neither is history. Set every round: a worker that replayed the gate reports it from its
        next round."""
        figures = self.snapshot()
        labels = {"gate": self._provider, "layer": api.gate_layer(self._provider)}
        for field, (name, description) in GATE_GAUGES.items():
            workflow.metric_meter().create_gauge_float(name, description).set(float(getattr(figures, field)), labels)
        if not self._breaker_on or self._grant_signal != api.SIGNAL_SLOT_GRANTED:  # a tenant gate: no breaker
            return
        b, now = self._state.breaker, workflow.now()
        mode = breaker.mode_at(b, now)
        workflow.set_current_details(
            f"**breaker {mode.value}** · {breaker.describe(b, self._policy, now)}\n\n"
            f"slots {len(self._state.holders)} / {math.floor(self._state.effective)} (limit {self._limit}) · "
            f"{len(self._state.queue)} waiting")
        gauge = workflow.metric_meter().create_gauge(BREAKER_STATE, "Provider breaker: 0 closed, 1 half-open, 2 open")
        gauge.set(MODE_VALUE[mode], {"provider": self._provider})

    async def _send(self, workflow_id: str, grant: SlotGrant) -> None:
        await workflow.get_external_workflow_handle(workflow_id).signal(self._grant_signal, grant)
